"""A durable store keeping each namespace as a JSON snapshot plus a commit log: :class:`FileStore`.

It honours the same contract as :class:`~firefly_orm.store.InMemoryStore` (upsert
on ``entry_id``, ``(created_at, entry_id)`` order, newest match for
``load_by_key``, expired entries never returned, idempotent ``delete``/``clear``,
copies in and out), with one documented difference: an ``entry_id`` is unique
*within a namespace*, not across the whole store (see :class:`FileStore`).

File layout
    A namespace is a JSON **snapshot**, ``base_dir/<prefix>-<hash>.json``, plus
    a **commit log** beside it, ``<prefix>-<hash>.log.jsonl``.  ``<hash>`` is
    the first 32 hex digits (128 bits) of the SHA-256 of the namespace's UTF-8
    bytes, so distinct namespaces get distinct files (``a/b``, ``a_b`` and
    ``a:b`` included, and names that differ only in case, which matters on
    case-insensitive file systems).  ``<prefix>`` is only for humans: the first
    48 characters of the namespace with everything outside ``A-Z a-z 0-9 _ -``
    replaced by ``_``.  A file name therefore never contains a path separator,
    ``..`` or a leading dot, and cannot leave ``base_dir`` whatever the
    namespace.  The snapshot is one JSON document in the upstream FileStore's
    shape, ``{entry_id: entry}`` (entries as :meth:`MemoryEntry.to_json_dict`
    writes them): ``json.load`` reads it.  The log holds the commits since the
    snapshot as JSON lines (a header naming the snapshot's SHA-256, then one
    record per commit: entries put, ids deleted); the format is described in
    :mod:`firefly_orm.file_store._log`.  The namespace is the snapshot with
    the log applied; the log is folded into the snapshot when it outgrows the
    snapshot (or dead entries outweigh live ones), by :meth:`FileStore.compact`
    and by :meth:`FileStore.close`.
    Every entry read back must carry the namespace the file was opened for, so
    even a hash collision would surface as
    :class:`~firefly_orm.errors.StoreCorruptedError` rather than mixing two
    namespaces.  A namespace whose last entry is deleted has its files
    removed.  ``<snapshot>.lock`` beside each snapshot is the namespace's
    lock; ``base_dir/.journal/`` holds the journals of commits in flight.
    Files of earlier versions are read: a snapshot alone (the first versions'
    format) needs nothing; a ``.json`` that is itself a log (the previous
    version's format) is converted into a snapshot when the store is opened.

Writes
    Every change happens under the namespace's lock: a per-file ``threading``
    lock (shared by every ``FileStore`` in the process) plus a
    :class:`filelock.FileLock` on ``<snapshot>.lock``, so neither threads nor
    processes lose updates.  A commit appends one line to the log of each
    namespace it changes and fsyncs it; a new namespace's snapshot (and every
    compaction's) is written whole to a temporary file, fsynced and moved into
    place with :func:`os.replace`.  Reads take the lock too, and each process
    keeps every namespace it has read parsed in memory
    (:class:`~firefly_orm.file_store._log.NamespaceLog`): a read or a write
    parses only the lines appended since this process last looked, so the cost
    of an operation follows its change, not the size of the namespace.

Crashes
    A commit over one namespace is one appended line: a process killed
    half-way leaves a torn last line, which readers ignore and the next writer
    cuts off (that commit was never acknowledged).  A compaction writes the new
    snapshot, then a new log naming it: killed in between, the old log names
    the old snapshot and is ignored (the new snapshot holds all of it).  A
    commit over several namespaces (an evicted turn moved to the archive, say)
    first writes a commit journal naming every file and its exact line
    (:mod:`firefly_orm.file_store._journal`), then appends, then removes the
    journal.  Whoever next locks one of those files (or opens the store) finds
    the journal of the dead writer, takes every lock it names and completes
    the commit; each step is idempotent, so a crash during the recovery is
    harmless too.  Other threads and processes therefore see all of a commit
    or none of it, also across a kill -9.  Temporary files of dead writers are
    removed when the store is opened and after a recovery.

Corruption
    A snapshot or log that cannot be read or parsed raises
    :class:`~firefly_orm.errors.StoreCorruptedError` naming the file, for reads
    and writes alike; the file is never reset or overwritten (only an explicit
    :meth:`FileStore.clear` removes it).  A lock file that is not a regular file
    (a planted symbolic link, say) raises :class:`~firefly_orm.errors.StoreError`
    naming it, and nothing is written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Unpack

import filelock

from firefly_orm._search import SearchHit, SearchRequest
from firefly_orm.bridges.twins import AsyncTwins, call_blocking
from firefly_orm.entry import MemoryEntry, validate_entry, validate_key
from firefly_orm.errors import StoreCorruptedError, StoreError
from firefly_orm.file_store import _journal as file_journal
from firefly_orm.file_store._commit import (
    commit,
    fold_log,
    load_state,
    remove_file,
    remove_orphans,
    roll_forward,
)
from firefly_orm.file_store._files import DATA_FILE, LOG_FILE, log_path_for, namespace_file_name
from firefly_orm.file_store._locks import thread_locks
from firefly_orm.file_store._log import Edit
from firefly_orm.file_store._read import is_old_format
from firefly_orm.file_store._vectors import (
    FileVectors,
    forget,
    remove_vectors,
    vector_file,
    vector_namespaces,
)
from firefly_orm.protocols import ListOptions, SearchOptions
from firefly_orm.uow import (
    StagedChanges,
    StagedUnitOfWork,
    apply_version,
    check_preconditions,
    select_entries,
)

__all__ = ["FileStore", "namespace_file_name"]

logger = logging.getLogger("firefly_orm")

_LOCK_SUFFIX = ".lock"


class FileStore(AsyncTwins, FileVectors):
    """A store that persists each namespace as a JSON snapshot plus a commit log in ``base_dir``.

    ``<namespace file>.json`` is one JSON document, ``{entry_id: entry}`` as
    the upstream FileStore writes it; the commits since it was written are
    appended to ``<namespace file>.log.jsonl`` and folded into it when the log
    outgrows it (or dead entries outweigh live ones), by :meth:`compact` and
    by :meth:`close` (after
    which every ``.json`` is the whole namespace).

    Safe to share between threads, and between processes that point at the same
    directory (on a local file system: the inter-process lock is ``flock``).
    See the module docstring for the file layout, the locking, crash recovery
    and the corruption policy.

    Entry ids are unique per namespace: saving an entry whose ``entry_id``
    already exists in *another* namespace does **not** move it (finding it
    would mean reading every file, or a global index that every write would
    have to lock).  The two namespaces then hold independent entries with the
    same id; ``delete``/``load`` only ever touch the namespace they are given.
    Ids from :func:`~firefly_orm.entry.new_entry_id` and
    :func:`~firefly_orm.entry.derived_entry_id` never collide across namespaces,
    so this only matters for callers that reuse ids on purpose.  Inside one unit
    of work, saving an id under a second namespace does drop the write staged
    under the first (as on every store).

    A commit that touches several namespaces holds all their locks and goes
    through a commit journal, so other users of the store see all of it or none
    of it, also when the writing process is killed half-way (the next user of
    any of those namespaces completes it).

    Each process keeps the namespaces it uses parsed in memory, so an
    operation reads only what other processes appended since.  Entries are
    kept packed (their JSON, compressed, beside what reads order and filter
    by) and built only when a read hands them out: a 20,000-turn
    conversation takes about 34 MB where parsed entries took 76 MB.  The
    memory is bounded, strictly, over all namespaces: at most
    :data:`~firefly_orm.file_store._commit.CACHE_MAX_ENTRIES` entries (100,000)
    and :data:`~firefly_orm.file_store._commit.CACHE_MAX_BYTES` bytes of records
    (32 MiB; in memory, about as much), least recently used namespaces
    dropped first.  A namespace dropped, or over a bound on its own (a very
    long conversation), is parsed again in full at its next use.

    Directories written by earlier versions open as they are: a ``.json``
    that is a commit log (the previous version's format) is converted into a
    snapshot when the store is opened.  Earlier versions do not read the
    ``.log.jsonl`` files, so upgrade every process sharing a directory
    together.

    The ``async_*`` methods are derived from the sync ones
    (:class:`~firefly_orm.bridges.twins.AsyncTwins`) and run in a worker
    thread, so file I/O never blocks the event loop.

    Args:
        base_dir: Directory of the namespace files; created (with parents) if
            missing.  Relative paths are resolved against the current directory
            once, at construction.
        lock_timeout: Seconds to wait for a namespace lock before raising
            :class:`~firefly_orm.errors.StoreError`; ``None`` waits forever.

    Raises:
        StoreError: If ``base_dir`` cannot be created, or a file of the
            previous version cannot be converted.
        StoreCorruptedError: If a commit journal left by a dead writer cannot
            be read or names a corrupt file.  (A corrupt namespace file of
            the previous version is left as it is, logged, and raises when
            its namespace is used.)
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str] = ".firefly_memory",
        *,
        lock_timeout: float | None = None,
    ) -> None:
        self._base_dir = Path(os.path.abspath(os.fspath(base_dir)))
        self._lock_timeout = lock_timeout
        try:
            self._base_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the FileStore directory {self._base_dir}") from exc
        remove_orphans(self._base_dir)
        for path in file_journal.pending(self._base_dir):
            journal = file_journal.read(path)
            if journal is not None:  # taking its files' locks completes it
                with self._locked(self._base_dir / step.name for step in journal.steps):
                    pass
        self._upgrade_files()

    # ------------------------------------------------------------------ protocol
    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Insert or replace ``entry`` (by ``entry_id``) in ``namespace``.

        The stored copy gets ``namespace`` and a bumped ``version`` (previous
        version plus one, or ``max(entry.version, 1)`` on insert); ``entry``
        itself is not modified.

        Args:
            namespace: Target namespace.
            entry: The entry to store.

        Raises:
            EntryValidationError: If the entry or namespace is invalid (nothing
                is written).
            StoreCorruptedError: If the namespace file is corrupt (it is left
                untouched).
            StoreError: If the file cannot be written.
        """
        validate_entry(entry, namespace)
        changes = StagedChanges()
        changes.writes[(namespace, entry.entry_id)] = entry
        self.apply_changes(changes)

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Non-expired entries of ``namespace`` in ``(created_at, entry_id)`` order.

        Args:
            namespace: The namespace to read; unknown namespaces give ``[]``.

        Returns:
            Fresh copies of the stored entries.

        Raises:
            EntryValidationError: If ``namespace`` is invalid.
            StoreCorruptedError: If the namespace file is corrupt or unreadable.
        """
        return self.read_list(namespace)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The newest non-expired entry of ``namespace`` with ``key``, or ``None``.

        Args:
            namespace: The namespace to search.
            key: The lookup key.

        Returns:
            A copy of the newest match by ``(created_at, entry_id)``, or ``None``.

        Raises:
            EntryValidationError: If ``namespace`` or ``key`` is invalid.
            StoreCorruptedError: If the namespace file is corrupt or unreadable.
        """
        newest = select_entries(self.read_by_key(namespace, key), limit=1, newest_first=True)
        return newest[0] if newest else None

    def delete(self, namespace: str, entry_id: str) -> None:
        """Remove one entry; no error if it does not exist.

        Args:
            namespace: The namespace holding the entry.
            entry_id: Id of the entry to remove.

        Raises:
            EntryValidationError: If ``namespace`` is invalid.
            StoreCorruptedError: If the namespace file is corrupt (it is left
                untouched).
            StoreError: If the file cannot be written.
        """
        if not self._may_exist(self.path_for(namespace)):
            return
        changes = StagedChanges()
        changes.writes[(namespace, entry_id)] = None
        self.apply_changes(changes)

    def clear(self, namespace: str) -> None:
        """Remove every entry of ``namespace`` (its file is deleted).

        The file is removed without being parsed, so this also disposes of a
        corrupt namespace file.

        Args:
            namespace: The namespace to empty; unknown namespaces are a no-op.

        Raises:
            EntryValidationError: If ``namespace`` is invalid.
            StoreError: If the file cannot be removed.
        """
        path = self.path_for(namespace)
        if not self._may_exist(path):
            return
        with self._locked([path]):
            remove_vectors(vector_file(path))
            remove_file(path)
        logger.debug("FileStore: cleared %r (%s)", namespace, path.name)

    # ------------------------------------------------------------------ extras
    @property
    def base_dir(self) -> Path:
        """The absolute directory holding the namespace files."""
        return self._base_dir

    def path_for(self, namespace: str) -> Path:
        """The file that holds ``namespace`` (it may not exist yet).

        Args:
            namespace: Any valid namespace.

        Returns:
            A path directly inside :attr:`base_dir`.

        Raises:
            EntryValidationError: If ``namespace`` is invalid.
        """
        path = self._base_dir / namespace_file_name(namespace)
        if path.parent != self._base_dir:  # cannot happen with the encoding; belt and braces
            raise StoreError(f"namespace {namespace!r} maps outside {self._base_dir}")
        return path

    def log_path_for(self, namespace: str) -> Path:
        """The commit log of ``namespace``, beside :meth:`path_for` (it may not exist).

        Raises:
            EntryValidationError: If ``namespace`` is invalid.
        """
        return log_path_for(self.path_for(namespace))

    @property
    def namespaces(self) -> list[str]:
        """Namespaces that currently hold at least one entry, sorted.

        Raises:
            StoreCorruptedError: If a namespace file is corrupt or unreadable.
        """
        found: list[str] = []
        for path in self._data_files():
            with self._locked([path]):
                state = load_state(path, None)
                if state is not None and state.namespace is not None and len(state.index):
                    found.append(state.namespace)
        return sorted(found)

    def cleanup_expired(self) -> int:
        """Delete expired entries in every namespace file.

        Returns:
            How many entries were removed.

        Raises:
            StoreCorruptedError: If a namespace file is corrupt (files processed
                before it keep their cleanup; it and the rest are untouched).
            StoreError: If a file cannot be written.
        """
        removed = 0
        for path in self._data_files():
            with self._locked([path]):
                state = load_state(path, None)
                if state is None or state.namespace is None:
                    continue
                expired = state.index.expired_ids()
                if expired:
                    forget(vector_file(path), expired)
                    commit(self._base_dir, {state.namespace: (path, state, Edit(deletes=expired))})
            removed += len(expired)
        logger.debug("FileStore: cleanup_expired removed %d entries", removed)
        return removed

    def compact(self, namespace: str | None = None) -> int:
        """Fold the commit log of ``namespace`` (default: of every namespace) into its snapshot.

        Afterwards ``<namespace file>.json`` alone holds the whole namespace
        (until the next write), which is what tools reading the upstream
        FileStore's files see.  Writes compact on their own when a log
        outgrows its snapshot; this is for handing the files over.

        Args:
            namespace: The namespace to compact, or ``None`` for all of them.

        Returns:
            How many namespaces had commits to fold.

        Raises:
            EntryValidationError: If ``namespace`` is invalid.
            StoreCorruptedError: If a namespace file is corrupt (namespaces
                compacted before it stay compacted).
            StoreError: If a file cannot be written (the namespace reads as before).
        """
        paths = self._data_files() if namespace is None else [self.path_for(namespace)]
        folded = 0
        for path in paths:
            if not self._may_exist(path):
                continue
            with self._locked([path]):
                state = load_state(path, namespace)
                if state is not None and fold_log(path, state):
                    folded += 1
        logger.debug("FileStore: compacted %d namespace(s) in %s", folded, self._base_dir)
        return folded

    async def async_compact(self, namespace: str | None = None) -> int:
        """Async twin of :meth:`compact` (runs in a worker thread)."""
        return await call_blocking(self.compact, namespace)

    def close(self) -> None:
        """Compact every namespace (see :meth:`compact`); the store stays usable.

        Raises:
            StoreCorruptedError: If a namespace file is corrupt.
            StoreError: If a file cannot be written.
        """
        self.compact()

    async def async_close(self) -> None:
        """Async twin of :meth:`close` (runs in a worker thread)."""
        await call_blocking(self.close)

    def unit_of_work(self, *, read_only: bool = False) -> StagedUnitOfWork:
        """A unit of work whose changes are applied on commit under the file locks.

        Version preconditions are checked at commit while every touched
        namespace is locked; a failed precondition raises
        :class:`~firefly_orm.errors.ConcurrencyError` and writes nothing.
        Reads inside it read the namespace file (under its lock, only what was
        appended since this process last read it) and return only the entries
        asked for.  ``read_only`` is accepted for the common signature; it
        changes nothing here.
        """
        return StagedUnitOfWork(self)

    def __repr__(self) -> str:
        return f"FileStore(base_dir={str(self._base_dir)!r})"

    # ------------------------------------------------------------------ staged backend
    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """The live entry with this id in ``namespace`` (a copy), or ``None``.

        Raises:
            EntryValidationError: If ``namespace`` is invalid.
            StoreCorruptedError: If the namespace file is corrupt or unreadable.
        """
        path = self.path_for(namespace)
        if not self._may_exist(path):
            return None
        with self._locked([path]):
            state = load_state(path, namespace)
            entry = None if state is None else state.index.get(entry_id)
            return None if entry is None or entry.is_expired else entry  # built for this read

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        """Every live entry of ``namespace`` with ``key`` (copies).

        Raises:
            EntryValidationError: If ``namespace`` or ``key`` is invalid.
            StoreCorruptedError: If the namespace file is corrupt or unreadable.
        """
        path = self.path_for(namespace)
        validate_key(key)
        if not self._may_exist(path):
            return []
        with self._locked([path]):
            state = load_state(path, namespace)
            return [] if state is None else state.index.with_key(key)  # built for this read

    def read_list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        """Live entries of ``namespace``, ordered and limited (see :class:`ListOptions`).

        Ordered by ``(key, created_at, entry_id)`` with ``key_prefix`` (only
        keys starting with it), else by ``(created_at, entry_id)``;
        ``newest_first`` reverses; ``limit`` applies after ordering.  Only the
        entries returned are visited (and copied), plus expired ones on the way.

        Raises:
            EntryValidationError: If ``namespace`` is invalid.
            StoreCorruptedError: If the namespace file is corrupt or unreadable.
        """
        path = self.path_for(namespace)
        if not self._may_exist(path):
            return []
        with self._locked([path]):
            state = load_state(path, namespace)
            return [] if state is None else state.index.select(**options)  # built for this read

    def read_search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> list[SearchHit]:
        """The committed matches of ``query`` in ``namespace`` (copies), best first.

        The tokenised match of :mod:`firefly_orm._search`, answered from the
        namespace's in-memory inverted index of ``search_text`` words (kept up
        to date like the rest of the parsed file): only entries holding one of
        the query's words are visited.

        Raises:
            EntryValidationError: If an argument is invalid.
            StoreCorruptedError: If the namespace file is corrupt or unreadable.
        """
        request = SearchRequest.build(namespace, query, **options)
        path = self.path_for(namespace)
        if request.finds_nothing or not self._may_exist(path):
            return []
        with self._locked([path]):
            state = load_state(path, namespace)
            return [] if state is None else state.index.search(request)  # built for this read

    def apply_changes(self, changes: StagedChanges) -> None:
        """Check the preconditions and apply ``changes`` holding every touched file's lock.

        Order: the entries of ``erased_users`` (in every namespace file, all
        locked), then the cleared namespaces, then the writes.

        Raises:
            ConcurrencyError: A version precondition failed (nothing is written).
            StoreCorruptedError: A touched namespace file is corrupt.
            StoreError: A file cannot be written.
        """
        namespaces = sorted(changes.namespaces() | vector_namespaces(changes))
        paths = {ns: self.path_for(ns) for ns in namespaces}
        every = self._data_files() if changes.erased_users else []
        while True:
            with self._locked([*paths.values(), *every]):
                if changes.erased_users and set(self._data_files()) - set(every):
                    every = self._data_files()  # a namespace appeared: lock it too
                    continue
                self._forget_vectors(changes, paths, every)  # vectors: file_store/_vectors.py
                written = self._apply_locked(changes, paths, every)
                self._store_vectors(changes, paths)
                break
        logger.debug(
            "FileStore: committed a unit of work over %d namespace(s), %d file(s) written",
            len(namespaces),
            written,
        )

    # ------------------------------------------------------------------ internals
    def _apply_locked(
        self, changes: StagedChanges, paths: dict[str, Path], every: list[Path]
    ) -> int:
        paths = dict(paths)
        states = {ns: load_state(path, ns) for ns, path in paths.items()}
        for path in every:
            state = load_state(path, None)
            if state is not None and state.namespace is not None:
                states.setdefault(state.namespace, state)
                paths.setdefault(state.namespace, path)

        def current(namespace: str, entry_id: str) -> MemoryEntry | None:
            state = states.get(namespace)
            return None if state is None else state.index.get(entry_id)

        check_preconditions(changes, current)
        edits: dict[str, Edit] = {}
        gone: dict[str, set[str]] = {}
        for ns, state in states.items():
            if state is None:
                continue
            if ns in changes.cleared and len(state.index):
                edits[ns] = Edit(clear=True)
                gone[ns] = set(state.index.ids())
            elif changes.erased_users:
                erased = state.index.ids_of_users(changes.erased_users)
                if erased:
                    edits[ns] = Edit(deletes=erased)
                    gone[ns] = set(erased)
        for (ns, entry_id), entry in changes.writes.items():
            state = states[ns]
            previous = None
            if state is not None and entry_id not in gone.get(ns, ()):
                previous = state.index.get(entry_id)
            if entry is None:
                if previous is not None:
                    edits.setdefault(ns, Edit()).deletes.append(entry_id)
            else:
                copy = apply_version(entry.copy_entry(namespace=ns), previous)
                edits.setdefault(ns, Edit()).puts.append(copy)
        return commit(
            self._base_dir, {ns: (paths[ns], states[ns], edit) for ns, edit in edits.items()}
        )

    @contextlib.contextmanager
    def _locked(self, paths: Iterable[Path]) -> Iterator[None]:
        """Hold the thread lock and the file lock of each path, in path order.

        Before handing over, complete any commit journal of a dead writer that
        names one of the files (taking the locks of all its files first).
        """
        wanted = {str(path) for path in paths}
        while True:
            with contextlib.ExitStack() as stack:
                for key in sorted(wanted):
                    self._lock(stack, key + _LOCK_SUFFIX)
                missing = self._recover(wanted)
                if not missing:
                    yield
                    return
            wanted |= missing

    def _lock(self, stack: contextlib.ExitStack, lock_path: str) -> None:
        timeout = -1.0 if self._lock_timeout is None else self._lock_timeout
        try:
            mode = os.lstat(lock_path).st_mode
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"cannot use the lock file {lock_path}: {exc}") from exc
        else:
            if not stat.S_ISREG(mode):
                kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                raise StoreError(
                    f"the lock file {lock_path} is {kind}; refusing to use it (nothing was "
                    "written; remove it and FileStore recreates it)"
                )
        stack.enter_context(thread_locks().hold(lock_path, timeout))
        try:
            stack.enter_context(filelock.FileLock(lock_path, timeout=timeout))
        except filelock.Timeout as exc:
            raise StoreError(
                f"timed out after {timeout}s waiting for the file lock {lock_path}"
            ) from exc
        except OSError as exc:
            raise StoreError(f"cannot take the file lock {lock_path}: {exc}") from exc

    def _recover(self, held: set[str]) -> set[str]:
        """Complete the journals naming a held file; return the files still to lock first."""
        for path in file_journal.pending(self._base_dir):
            journal = file_journal.read(path)
            if journal is None:
                continue
            files = {str(self._base_dir / step.name) for step in journal.steps}
            if files.isdisjoint(held):
                continue  # another commit, in flight or waiting for its own files' users
            if not files <= held:
                return files - held
            roll_forward(self._base_dir, path, journal)
        return set()

    def _upgrade_files(self) -> None:
        """Convert files of the previous version; remove logs whose namespace is gone."""
        for path in self._data_files():
            if not is_old_format(path):
                continue
            with self._locked([path]):
                try:
                    state = load_state(path, None)
                except StoreCorruptedError as exc:  # raised again by each use of it
                    logger.warning("FileStore: cannot convert %s: %s", path.name, exc)
                    continue
                if state is not None and state.old_format:
                    fold_log(path, state)
                    logger.info("FileStore: converted %s to a snapshot and a log", path.name)
        for path in self._listed(LOG_FILE):
            snapshot = path.with_name(path.name.removesuffix(".log.jsonl") + ".json")
            if not os.path.lexists(snapshot):
                with self._locked([snapshot]):
                    if not os.path.lexists(snapshot):  # (a namespace being created removes it too)
                        remove_file(snapshot)

    def _may_exist(self, path: Path) -> bool:
        """Whether ``path`` exists or may be created by completing a dead writer's commit."""
        return os.path.lexists(path) or bool(file_journal.pending(self._base_dir))

    def _data_files(self) -> list[Path]:
        return self._listed(DATA_FILE)

    def _listed(self, pattern: re.Pattern[str]) -> list[Path]:
        try:
            names = sorted(os.listdir(self._base_dir))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"cannot list the FileStore directory {self._base_dir}") from exc
        return [self._base_dir / name for name in names if pattern.fullmatch(name)]
