"""How :class:`~firefly_orm.FileStore` changes its files: parsed states, commits, recovery.

Every function here runs with the locks of the files it touches held by the
caller (:class:`~firefly_orm.file_store.FileStore` takes them).

* :func:`load_state`: a namespace's parsed state, from the process-wide
  cache, brought up to date with what was appended since (see
  :func:`~firefly_orm.file_store._read.read_state`).
* :func:`commit`: one commit's edits.  A single namespace gets one line
  appended to its log (a new namespace gets its snapshot written whole);
  several go through a commit journal (:mod:`firefly_orm.file_store._journal`):
  journal written, files changed, journal removed.  If a change fails half-way
  the files are put back and the journal dropped; if even that fails, the
  journal stays and the next user completes the commit.  A namespace due for
  compaction (:meth:`~firefly_orm.file_store._log.NamespaceLog.needs_compaction`)
  is compacted just before its line is appended (a failed compaction is only
  logged), so a process that had read it up to there adopts the new files as
  they are; one in the previous version's format is converted first.
* :func:`fold_log`: compact on request (:meth:`FileStore.compact
  <firefly_orm.file_store.FileStore.compact>`).
* :func:`roll_forward`: complete the journal of a writer that is gone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from firefly_orm.errors import StoreCorruptedError, StoreError
from firefly_orm.file_store import _journal as file_journal
from firefly_orm.file_store._files import log_path_for, new_id, orphan_temps
from firefly_orm.file_store._journal import JOURNAL_DIR, Journal, Step
from firefly_orm.file_store._locks import renewed_after_fork
from firefly_orm.file_store._log import (
    Edit,
    NamespaceLog,
    create_namespace,
    decode_record,
    encode_record,
    remove_namespace_files,
)
from firefly_orm.file_store._read import read_state

__all__ = [
    "CACHE_MAX_BYTES",
    "CACHE_MAX_ENTRIES",
    "cache_totals",
    "commit",
    "fold_log",
    "forget",
    "load_state",
    "remove_file",
    "remove_orphans",
    "roll_forward",
]

logger = logging.getLogger("firefly_orm")

#: Entries a process keeps in memory over all namespaces (packed, see
#: :mod:`~firefly_orm.file_store._index`: about 1.7 KB each for a conversation
#: turn of 1.5 KB in the file).  Read at every use: assign to change it.
CACHE_MAX_ENTRIES = 100_000
#: Bytes of live records (as written in the files) whose entries a process
#: keeps in memory over all namespaces (packed, they take about as much).
#: Read at every use: assign to change it.
CACHE_MAX_BYTES = 32 * 1024 * 1024


class _StateCache:
    """Process-wide parsed namespace files by path; a state is used under its file's lock.

    Bounded, strictly: the least recently used states are dropped while the
    states kept hold more than :data:`CACHE_MAX_ENTRIES` entries or
    :data:`CACHE_MAX_BYTES` bytes of records, and a state that alone exceeds
    a bound is not kept at all (it is parsed again in full at its next use).
    So a huge namespace costs its parse on each use instead of memory that
    grows with it.
    """

    def __init__(self, max_entries: int | None = None, max_bytes: int | None = None) -> None:
        self._guard = threading.Lock()
        self._states: OrderedDict[str, tuple[NamespaceLog, int, int]] = OrderedDict()
        self._entries = 0
        self._bytes = 0
        self._max_entries = max_entries
        self._max_bytes = max_bytes

    @property
    def totals(self) -> tuple[int, int, int]:
        """``(states, entries, bytes)`` kept now."""
        with self._guard:
            return len(self._states), self._entries, self._bytes

    def limits(self) -> tuple[int, int]:
        """``(entries, bytes)``: the bounds in force."""
        return (
            CACHE_MAX_ENTRIES if self._max_entries is None else self._max_entries,
            CACHE_MAX_BYTES if self._max_bytes is None else self._max_bytes,
        )

    def get(self, key: str) -> NamespaceLog | None:
        with self._guard:
            item = self._states.get(key)
            if item is None:
                return None
            self._states.move_to_end(key)
            return item[0]

    def put(self, key: str, state: NamespaceLog) -> None:
        entries, size = len(state.index), max(0, state.live_bytes)
        max_entries, max_bytes = self.limits()
        with self._guard:
            self._pop(key)
            if entries > max_entries or size > max_bytes:
                return  # alone over a bound: not kept
            self._states[key] = (state, entries, size)
            self._entries += entries
            self._bytes += size
            while self._entries > max_entries or self._bytes > max_bytes:
                self._pop(next(iter(self._states)))

    def discard(self, key: str) -> None:
        with self._guard:
            self._pop(key)

    def _pop(self, key: str) -> None:
        old = self._states.pop(key, None)
        if old is not None:
            self._entries -= old[1]
            self._bytes -= old[2]


_cache = _StateCache()
renewed_after_fork(globals(), "_cache", _StateCache)


@dataclass
class _Plan:
    """One file of a commit: its state before, and the change (``line`` None: remove it)."""

    path: Path
    namespace: str
    state: NamespaceLog | None
    line: bytes | None


# --------------------------------------------------------------------------- states


def load_state(path: Path, namespace: str | None) -> NamespaceLog | None:
    """The up-to-date state of a namespace file (``None``: there is none).

    Raises:
        StoreCorruptedError: The file is unreadable or corrupt.
    """
    key = str(path)
    try:
        state = read_state(path, namespace, _cache.get(key))
    except BaseException:
        _cache.discard(key)
        raise
    if state is None:
        _cache.discard(key)
    else:
        _cache.put(key, state)
    return state


def cache_totals() -> tuple[int, int, int]:
    """``(namespaces, entries, bytes of records)`` this process keeps parsed now."""
    return _cache.totals


def forget(path: Path) -> None:
    """Drop the cached state of ``path`` (the next use parses the file again)."""
    _cache.discard(str(path))


def remove_file(path: Path) -> None:
    """Remove the namespace whose snapshot is ``path`` (no error if it is gone), durably.

    Raises:
        StoreError: A file could not be removed.
    """
    forget(path)
    remove_namespace_files(path)


def fold_log(path: Path, state: NamespaceLog) -> bool:
    """Fold the log of ``state`` into its snapshot; whether there was anything to fold.

    A namespace in the previous version's format is converted; one left
    without entries is removed.

    Raises:
        StoreError: A file could not be written (the namespace reads as before).
    """
    if not state.old_format and state.log_bytes == 0:
        return False
    if len(state.index) == 0:
        remove_file(path)
        return True
    try:
        state.compact()
    finally:
        _cache.put(str(path), state)
    return True


def remove_orphans(base_dir: Path) -> None:
    """Remove the temporary files of writers that are gone."""
    for directory in (base_dir, base_dir / JOURNAL_DIR):
        for orphan in orphan_temps(directory):
            with contextlib.suppress(OSError):
                orphan.unlink()
                logger.info("FileStore: removed %s, left by a writer that stopped", orphan)


# --------------------------------------------------------------------------- commits


def commit(base_dir: Path, edits: dict[str, tuple[Path, NamespaceLog | None, Edit]]) -> int:
    """Write ``edits`` (namespace -> file, its state, its edit); return how many files changed.

    A file left without entries is removed.  Nothing is changed if an error is
    raised, unless the log says the commit could not be undone (it is then
    completed by the next user of those files).

    Raises:
        StoreError: A file could not be written.
    """
    commit_id = new_id()
    plans: list[_Plan] = []
    for namespace in sorted(edits):
        path, state, edit = edits[namespace]
        remaining = len(edit.puts) if state is None else state.remaining_after(edit)
        if remaining == 0:
            if state is not None:
                plans.append(_Plan(path, namespace, state, None))
            continue
        if state is not None:
            if state.old_format:
                state.compact()  # converted first (same entries)
            elif state.needs_compaction():
                _compact(state)  # before the append: a reader that saw it so far adopts it
            state.ensure_log()  # started before a journal records where the line goes
            _cache.put(str(path), state)
        plans.append(_Plan(path, namespace, state, encode_record(commit_id, edit)))
    plans.sort(key=lambda plan: plan.line is None)  # removals last: the rest can be undone
    if len(plans) == 1:
        _run(plans[0])
    elif plans:
        _run_journaled(base_dir, commit_id, plans)
    return len(plans)


def _run(plan: _Plan) -> None:
    """Apply one file's change: append its line, create it, or remove it."""
    key = str(plan.path)
    try:
        if plan.line is None:
            remove_file(plan.path)
        elif plan.state is None:
            create_namespace(plan.path, plan.namespace, plan.line)
            load_state(plan.path, plan.namespace)
        else:
            plan.state.ensure_log()  # (converts a file of the previous version, in a recovery)
            plan.state.append(plan.line)
            _cache.put(key, plan.state)
    except BaseException:
        _cache.discard(key)
        raise


def _run_journaled(base_dir: Path, commit_id: str, plans: list[_Plan]) -> None:
    """Apply a commit over several files through a commit journal."""
    steps = tuple(
        Step(
            plan.path.name,
            plan.namespace,
            plan.line,
            None if plan.state is None else plan.state.mark,
            0 if plan.state is None else plan.state.offset,
        )
        for plan in plans
    )
    journal = file_journal.write(base_dir, Journal(commit_id, steps))
    done: list[tuple[_Plan, Step]] = []
    try:
        for plan, step in zip(plans, steps, strict=True):
            _run(plan)
            done.append((plan, step))
    except BaseException:
        for plan in plans:
            _cache.discard(str(plan.path))
        if _undo(done):
            with contextlib.suppress(StoreError):
                file_journal.remove(journal)
        if journal.exists():
            logger.error(
                "FileStore: commit %s failed half-way and could not be undone; it will be "
                "completed by the next access to %s",
                commit_id,
                ", ".join(plan.path.name for plan in plans),
            )
        raise
    try:
        file_journal.remove(journal)
    except StoreError as exc:  # the commit is complete; completing it again changes nothing
        logger.warning("FileStore: %s", exc)


def _undo(done: list[tuple[_Plan, Step]]) -> bool:
    """Put the files of a failed journaled commit back as they were, if possible."""
    try:
        for plan, step in reversed(done):
            if plan.line is None:
                return False  # a removed file cannot be put back (removals come last)
            if step.generation is None:
                os.unlink(plan.path)  # created by this commit
            else:
                fd = os.open(log_path_for(plan.path), os.O_WRONLY)
                try:
                    os.ftruncate(fd, step.offset)
                    os.fsync(fd)
                finally:
                    os.close(fd)
    except OSError:
        return False
    return True


def _compact(state: NamespaceLog) -> None:
    try:
        state.compact()
    except StoreError as exc:  # the namespace reads as before (its files just longer)
        logger.warning("FileStore: could not compact %s: %s", state.path, exc)
    else:
        logger.debug("FileStore: compacted %s (%d entries)", state.path.name, len(state.index))


# --------------------------------------------------------------------------- recovery


def roll_forward(base_dir: Path, path: Path, journal: Journal) -> None:
    """Complete the commit of a dead writer (the caller holds the lock of every file it names).

    Raises:
        StoreCorruptedError: The journal holds a bad line, or a file it names is
            corrupt or shorter than the journal records (nothing is changed by
            the check of the lines).
        StoreError: A file could not be written (the journal stays).
    """
    for step in journal.steps:
        if step.line is not None:
            try:
                decode_record(json.loads(step.line), step.namespace)
            except Exception as exc:
                raise StoreCorruptedError(
                    f"corrupt commit journal {path}: bad line for {step.name}: {exc}"
                ) from exc
    for step in journal.steps:
        target = base_dir / step.name
        state = load_state(target, step.namespace)
        if _step_pending(path, step, state):
            _run(_Plan(target, step.namespace, state, step.line))
    file_journal.remove(path)
    remove_orphans(base_dir)
    logger.warning(
        "FileStore: completed commit %s over %d file(s), interrupted when its writer stopped",
        journal.commit_id,
        len(journal.steps),
    )


def _step_pending(path: Path, step: Step, state: NamespaceLog | None) -> bool:
    """Whether a journal step still has to be applied to the namespace in ``state``."""
    if step.generation is None:
        return state is None and step.line is not None
    if state is None or state.mark != step.generation:
        return False  # removed or rewritten since: the step was applied
    if state.offset < step.offset:
        raise StoreCorruptedError(
            f"memory log {state.log_path} is shorter than the commit journal {path} records"
        )
    return state.offset == step.offset
