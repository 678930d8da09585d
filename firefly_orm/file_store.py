"""A durable store that keeps one JSON file per namespace: :class:`FileStore`.

It honours the same contract as :class:`~firefly_orm.store.InMemoryStore` (upsert
on ``entry_id``, ``(created_at, entry_id)`` order, newest match for
``load_by_key``, expired entries never returned, idempotent ``delete``/``clear``,
copies in and out), with one documented difference: an ``entry_id`` is unique
*within a namespace*, not across the whole store (see :class:`FileStore`).

File layout
    ``base_dir/<prefix>-<hash>.json`` holds a JSON object mapping each
    ``entry_id`` to :meth:`MemoryEntry.to_json_dict` output (which includes the
    entry's namespace).  ``<hash>`` is the first 32 hex digits (128 bits) of the
    SHA-256 of the namespace's UTF-8 bytes, so distinct namespaces get distinct
    files (``a/b``, ``a_b`` and ``a:b`` included, and names that differ only in
    case, which matters on case-insensitive file systems).  ``<prefix>`` is only
    for humans: the first 48 characters of the namespace with everything outside
    ``A-Z a-z 0-9 _ -`` replaced by ``_``.  A file name therefore never contains a
    path separator, ``..`` or a leading dot, and cannot leave ``base_dir``
    whatever the namespace (``../x``, ``/abs``, very long or non-ASCII names are
    all accepted and stored inside ``base_dir``).  Every entry read back must
    carry the namespace the file was opened for, so even a hash collision would
    surface as :class:`~firefly_orm.errors.StoreCorruptedError` rather than
    mixing two namespaces.  A namespace whose last entry is deleted has its file
    removed.

Writes
    Each change is a read-modify-write of the namespace file under a lock: a
    per-file ``threading`` lock (shared by every ``FileStore`` in the process)
    plus a :class:`filelock.FileLock` on ``<file>.lock`` beside it, so neither
    threads nor processes lose updates.  The new content goes to a temporary
    file in ``base_dir`` that is flushed and fsync'ed, then moved over the old
    file with :func:`os.replace`: readers see the old file or the new one, never
    a torn one.  Reads take the same lock, so a unit of work spanning several
    namespaces is observed all-or-nothing by other threads and processes.
    Lock files are empty and stay in place after the namespace is cleared
    (deleting a lock file that another process may be waiting on would break
    mutual exclusion); reads of a namespace that has no file create nothing.

Corruption
    A file that cannot be read or parsed raises
    :class:`~firefly_orm.errors.StoreCorruptedError` naming the file, for reads
    and writes alike; the file is never reset or overwritten (only an explicit
    :meth:`FileStore.clear` removes it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Unpack

import filelock

from firefly_orm.bridges.twins import AsyncTwins
from firefly_orm.entry import MemoryEntry, validate_entry, validate_key, validate_namespace
from firefly_orm.errors import StoreCorruptedError, StoreError
from firefly_orm.protocols import ListOptions
from firefly_orm.uow import (
    StagedChanges,
    StagedUnitOfWork,
    apply_version,
    check_preconditions,
    select_entries,
    sort_entries,
)

__all__ = ["FileStore", "namespace_file_name"]

logger = logging.getLogger("firefly_orm")

_PREFIX_CHARS = 48
_HASH_HEX = 32
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_DATA_FILE = re.compile(r"[A-Za-z0-9_-]{1,48}-[0-9a-f]{32}\.json")
_LOCK_SUFFIX = ".lock"


def namespace_file_name(namespace: str) -> str:
    """The file name (no directory) that holds ``namespace``.

    Args:
        namespace: Any namespace :func:`~firefly_orm.entry.validate_namespace`
            accepts.

    Returns:
        ``<prefix>-<hash>.json`` as described in the module docstring.

    Raises:
        EntryValidationError: If ``namespace`` is not a valid namespace.
    """
    validate_namespace(namespace)
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()
    prefix = _UNSAFE.sub("_", namespace[:_PREFIX_CHARS])
    if prefix.startswith("-"):  # keep names from looking like command-line options
        prefix = "_" + prefix[1:]
    return f"{prefix}-{digest[:_HASH_HEX]}.json"


class _ThreadLocks:
    """Process-wide, reference-counted ``threading.Lock`` per lock-file path."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def hold(self, key: str, timeout: float) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            if not lock.acquire(timeout=timeout):
                raise StoreError(f"timed out after {timeout}s waiting for the lock on {key}")
            try:
                yield
            finally:
                lock.release()
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)


_thread_locks = _ThreadLocks()


def _reset_thread_locks_after_fork() -> None:
    # A forked child must not inherit locks held by threads that do not exist in it.
    global _thread_locks
    _thread_locks = _ThreadLocks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_thread_locks_after_fork)


class FileStore(AsyncTwins):
    """A store that persists each namespace as one JSON file in ``base_dir``.

    Safe to share between threads, and between processes that point at the same
    directory (on a local file system: the inter-process lock is ``flock``).
    See the module docstring for the file layout, the locking and the
    corruption policy.

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

    A commit that touches several namespaces holds all their locks and replaces
    every file atomically, so other users of the store see all of it or none of
    it; a crash of the machine half-way through the final renames can still
    leave only some of the files updated (a single-namespace change is always
    all-or-nothing).

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
        StoreError: If ``base_dir`` cannot be created.
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
        copy = entry.copy_entry(namespace=namespace)
        path = self.path_for(namespace)
        with self._locked([path]):
            entries = self._read(path, namespace)
            apply_version(copy, entries.get(copy.entry_id))
            entries[copy.entry_id] = copy
            self._write_files({path: entries})
        logger.debug(
            "FileStore: saved %s in %r (version %d, %s)",
            copy.entry_id,
            namespace,
            copy.version,
            path.name,
        )

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
        path = self.path_for(namespace)
        if not os.path.lexists(path):
            return
        with self._locked([path]):
            entries = self._read(path, namespace)
            if entries.pop(entry_id, None) is None:
                return
            self._write_files({path: entries})
        logger.debug("FileStore: deleted %s from %r", entry_id, namespace)

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
        if not os.path.lexists(path):
            return
        with self._locked([path]):
            self._write_files({path: {}})
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

    @property
    def namespaces(self) -> list[str]:
        """Namespaces that currently hold at least one entry, sorted.

        Raises:
            StoreCorruptedError: If a namespace file is corrupt or unreadable.
        """
        found: list[str] = []
        for path in self._data_files():
            with self._locked([path]):
                namespace, entries = self._read_any(path)
            if namespace is not None and entries:
                found.append(namespace)
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
                _, entries = self._read_any(path)
                expired = [entry_id for entry_id, e in entries.items() if e.is_expired]
                if not expired:
                    continue
                for entry_id in expired:
                    del entries[entry_id]
                self._write_files({path: entries})
            removed += len(expired)
        logger.debug("FileStore: cleanup_expired removed %d entries", removed)
        return removed

    def unit_of_work(self, *, read_only: bool = False) -> StagedUnitOfWork:
        """A unit of work whose changes are applied on commit under the file locks.

        Version preconditions are checked at commit while every touched
        namespace is locked; a failed precondition raises
        :class:`~firefly_orm.errors.ConcurrencyError` and writes nothing.
        Reads inside it read the namespace file (under its lock) and return
        only the entries asked for.  ``read_only`` is accepted for the common
        signature; it changes nothing here.
        """
        return StagedUnitOfWork(self)

    def __repr__(self) -> str:
        return f"FileStore(base_dir={str(self._base_dir)!r})"

    # ------------------------------------------------------------------ staged backend
    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """The live entry with this id in ``namespace``, or ``None``.

        Raises:
            EntryValidationError: If ``namespace`` is invalid.
            StoreCorruptedError: If the namespace file is corrupt or unreadable.
        """
        entry = self._read_locked(self.path_for(namespace), namespace).get(entry_id)
        return None if entry is None or entry.is_expired else entry

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        """Every live entry of ``namespace`` with ``key``.

        Raises:
            EntryValidationError: If ``namespace`` or ``key`` is invalid.
            StoreCorruptedError: If the namespace file is corrupt or unreadable.
        """
        path = self.path_for(namespace)
        validate_key(key)
        entries = self._read_locked(path, namespace).values()
        return [e for e in entries if e.key == key and not e.is_expired]

    def read_list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        """Live entries of ``namespace``, ordered and limited (see :class:`ListOptions`).

        Ordered by ``(key, created_at, entry_id)`` with ``key_prefix`` (only
        keys starting with it), else by ``(created_at, entry_id)``;
        ``newest_first`` reverses; ``limit`` applies after ordering.

        Raises:
            EntryValidationError: If ``namespace`` is invalid.
            StoreCorruptedError: If the namespace file is corrupt or unreadable.
        """
        entries = self._read_locked(self.path_for(namespace), namespace).values()
        return select_entries(entries, **options)

    def apply_changes(self, changes: StagedChanges) -> None:
        """Check the preconditions and apply ``changes`` holding every touched file's lock.

        Raises:
            ConcurrencyError: A version precondition failed (nothing is written).
            StoreCorruptedError: A touched namespace file is corrupt.
            StoreError: A file cannot be written.
        """
        namespaces = sorted(changes.namespaces())
        paths = {ns: self.path_for(ns) for ns in namespaces}
        with self._locked([paths[ns] for ns in namespaces]):
            state = {ns: self._read(paths[ns], ns) for ns in namespaces}

            def current(namespace: str, entry_id: str) -> MemoryEntry | None:
                return state[namespace].get(entry_id)

            check_preconditions(changes, current)
            dirty: set[str] = set()
            for ns in changes.cleared:
                if state[ns]:
                    state[ns] = {}
                    dirty.add(ns)
            for (ns, entry_id), entry in changes.writes.items():
                if entry is None:
                    if state[ns].pop(entry_id, None) is not None:
                        dirty.add(ns)
                else:
                    copy = entry.copy_entry(namespace=ns)
                    state[ns][entry_id] = apply_version(copy, state[ns].get(entry_id))
                    dirty.add(ns)
            self._write_files({paths[ns]: state[ns] for ns in sorted(dirty)})
        logger.debug(
            "FileStore: committed a unit of work over %d namespace(s), %d written",
            len(namespaces),
            len(dirty),
        )

    # ------------------------------------------------------------------ internals
    @contextlib.contextmanager
    def _locked(self, paths: Iterable[Path]) -> Iterator[None]:
        """Hold the thread lock and the file lock of each path, in the given order."""
        timeout = -1.0 if self._lock_timeout is None else self._lock_timeout
        with contextlib.ExitStack() as stack:
            for path in paths:
                lock_path = str(path) + _LOCK_SUFFIX
                stack.enter_context(_thread_locks.hold(lock_path, timeout))
                try:
                    stack.enter_context(filelock.FileLock(lock_path, timeout=timeout))
                except filelock.Timeout as exc:
                    raise StoreError(
                        f"timed out after {timeout}s waiting for the file lock {lock_path}"
                    ) from exc
            yield

    def _data_files(self) -> list[Path]:
        try:
            names = sorted(os.listdir(self._base_dir))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"cannot list the FileStore directory {self._base_dir}") from exc
        return [self._base_dir / name for name in names if _DATA_FILE.fullmatch(name)]

    def _read_locked(self, path: Path, namespace: str) -> dict[str, MemoryEntry]:
        """Read under the lock; a missing file needs no lock (a rename is atomic).

        Skipping the lock for namespaces that were never written also keeps
        reads of unknown namespaces from leaving lock files behind.
        """
        if not os.path.lexists(path):
            return {}
        with self._locked([path]):
            return self._read(path, namespace)

    def _read(self, path: Path, namespace: str) -> dict[str, MemoryEntry]:
        return self._parse(path, namespace)[1]

    def _read_any(self, path: Path) -> tuple[str | None, dict[str, MemoryEntry]]:
        return self._parse(path, None)

    def _parse(
        self, path: Path, namespace: str | None
    ) -> tuple[str | None, dict[str, MemoryEntry]]:
        """Read and check one namespace file; a missing file is an empty namespace."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return namespace, {}
        except OSError as exc:
            raise StoreCorruptedError(f"cannot read memory file {path}: {exc}") from exc
        try:
            data: Any = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError(f"expected a JSON object, got {type(data).__name__}")
            entries: dict[str, MemoryEntry] = {}
            for entry_id, item in data.items():
                if not isinstance(item, dict):
                    raise ValueError(f"entry {entry_id!r} is not a JSON object")
                entry = MemoryEntry.from_dict(item)
                validate_entry(entry, entry.namespace)
                if entry.entry_id != entry_id:
                    raise ValueError(f"entry {entry_id!r} has entry_id {entry.entry_id!r}")
                if namespace is None:
                    namespace = entry.namespace
                    if namespace_file_name(namespace) != path.name:
                        raise ValueError(f"namespace {namespace!r} does not belong in this file")
                elif entry.namespace != namespace:
                    raise ValueError(
                        f"entry {entry_id!r} belongs to namespace {entry.namespace!r}, "
                        f"not {namespace!r}"
                    )
                entries[entry_id] = entry
        except Exception as exc:
            raise StoreCorruptedError(f"corrupt memory file {path}: {exc}") from exc
        return namespace, entries

    def _write_files(self, contents: dict[Path, dict[str, MemoryEntry]]) -> None:
        """Replace each file with its entries (an empty dict removes the file).

        Every new file is fully written and fsync'ed before the first rename, so
        a failure while preparing leaves every file as it was.
        """
        prepared: list[tuple[Path, Path | None]] = []
        try:
            for path, entries in contents.items():
                prepared.append((path, self._write_temp(path, entries) if entries else None))
        except BaseException:
            for _, tmp in prepared:
                if tmp is not None:
                    with contextlib.suppress(OSError):
                        tmp.unlink()
            raise
        try:
            for index, (path, tmp) in enumerate(prepared):
                if tmp is None:
                    path.unlink(missing_ok=True)
                else:
                    os.replace(tmp, path)
                    prepared[index] = (path, None)
        except OSError as exc:
            for _, tmp in prepared:
                if tmp is not None:
                    with contextlib.suppress(OSError):
                        tmp.unlink()
            raise StoreError(f"cannot update memory files in {self._base_dir}: {exc}") from exc
        if contents:
            self._fsync_dir()

    def _write_temp(self, path: Path, entries: dict[str, MemoryEntry]) -> Path:
        payload = {e.entry_id: e.to_json_dict() for e in sort_entries(entries.values())}
        text = json.dumps(payload, indent=2, ensure_ascii=True, allow_nan=False)
        try:
            fd, tmp_name = tempfile.mkstemp(
                dir=self._base_dir, prefix=f".{path.name}.", suffix=".tmp"
            )
        except OSError as exc:
            raise StoreError(f"cannot create a temporary file for {path}: {exc}") from exc
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(text.encode("ascii"))
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            if isinstance(exc, OSError):
                raise StoreError(f"cannot write memory file {path}: {exc}") from exc
            raise
        return tmp

    def _fsync_dir(self) -> None:
        """Make the renames durable (POSIX; a no-op where directories cannot be opened)."""
        if os.name != "posix":
            return
        try:
            fd = os.open(self._base_dir, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
