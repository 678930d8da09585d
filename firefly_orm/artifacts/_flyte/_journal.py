"""The live workspace's changes on disk: a redo journal, applied by atomic renames.

A change of a :class:`~firefly_orm.artifacts._flyte.DirectoryWorkspace`
touches several files of Flyte's layout (the file, its metadata, the audit
log, a kept version, ``meta/@workspace.json``).  To make them one change, even
when the writing process is killed (``kill -9``) half way:

1. the new content of every file that changes (and the files to remove) is
   written to ``meta/@live/journal.json``: in a temporary file, fsynced, then
   renamed into place; until that rename nothing has changed;
2. each file is replaced by a rename of a fsynced temporary file (so no file is
   ever torn); the audit log, which only grows, is cut back to its old size and
   the new lines appended (so redoing it appends them once);
3. a new generation token is written (``meta/@live/generation``: other
   processes see that their copy is stale), and the journal is removed.

Whoever next takes the lock finds a journal left by a killed writer and redoes
it (every step is idempotent), so the directory is always the state before or
after a whole change.  Temporary files live in ``meta/@live/tmp/`` and are
removed under the lock; readers of the layout skip ``meta/@live/``.

The lock is :class:`filelock.FileLock` on ``meta/@live/lock`` (``flock`` on a
local file system): the kernel releases it when its process dies.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import filelock

from firefly_orm.artifacts._flyte._layout import (
    AUDIT_LOG_PATH,
    LIVE_DIR,
    LIVE_JOURNAL_PATH,
    DirectoryLayoutError,
    exact_keys,
    json_bytes,
    mtime_ns,
    parse_json,
)
from firefly_orm.file_store._log import fsync_dir

__all__ = [
    "GENERATION_PATH",
    "Content",
    "Journal",
    "commit",
    "diff",
    "directory_lock",
    "generation",
    "recover",
]

#: Changes each time a change is applied: a process whose copy is older reloads.
GENERATION_PATH = f"{LIVE_DIR}/generation"
_LOCK_PATH = f"{LIVE_DIR}/lock"
_TMP_DIR = f"{LIVE_DIR}/tmp"


@dataclass(frozen=True)
class Content:
    """One file of the directory as the workspace last wrote (or read) it."""

    data: bytes
    mtime: datetime | None = None


def _full(root: Path, rel: str) -> Path:
    return root.joinpath(*rel.split("/"))


@contextlib.contextmanager
def directory_lock(root: Path, timeout: float) -> Iterator[None]:
    """Hold the directory's inter-process lock (``meta/@live/lock``).

    Raises:
        DirectoryLayoutError: Not acquired within ``timeout`` seconds.
    """
    lock_path = _full(root, _LOCK_PATH)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with filelock.FileLock(str(lock_path), timeout=timeout, thread_local=False):
            yield
    except filelock.Timeout:
        raise DirectoryLayoutError(
            str(root), f"its lock ({_LOCK_PATH}) was held by another writer for {timeout} s"
        ) from None


@dataclass(frozen=True)
class Journal:
    """A change to apply: files to write (``None``: remove) and lines appended to the audit log.

    Attributes:
        generation: The token the directory has once the change is applied.
        writes: The new content of each changed file (``None``: the file goes).
        audit_offset: The audit log's size before the change (``None``: it is
            not appended to; it is then rewritten whole through ``writes``, or
            left alone).
        audit_lines: What the change appends to the audit log.
    """

    generation: str
    writes: Mapping[str, Content | None]
    audit_offset: int | None = None
    audit_lines: bytes = b""

    def to_bytes(self) -> bytes:
        """The journal as written to ``meta/@live/journal.json``."""

        def encoded(content: Content | None) -> Any:
            if content is None:
                return None
            ns = None if content.mtime is None else mtime_ns(content.mtime)
            return {"data": base64.b64encode(content.data).decode("ascii"), "mtime_ns": ns}

        return json_bytes(
            {
                "generation": self.generation,
                "writes": {rel: encoded(c) for rel, c in sorted(self.writes.items())},
                "audit_offset": self.audit_offset,
                "audit_lines": base64.b64encode(self.audit_lines).decode("ascii"),
            },
            indent=None,
        )

    def stored(self) -> _Stored:
        """The journal as :func:`recover` reads it back."""
        writes = {
            rel: None if c is None else (c.data, None if c.mtime is None else mtime_ns(c.mtime))
            for rel, c in self.writes.items()
        }
        return _Stored(self.generation, writes, self.audit_offset, self.audit_lines)

    @property
    def empty(self) -> bool:
        """Whether it changes nothing."""
        return not self.writes and self.audit_offset is None

    @staticmethod
    def from_bytes(data: bytes) -> _Stored:
        """A journal's bytes read back (``meta/@live/journal.json``)."""
        where = LIVE_JOURNAL_PATH
        doc = exact_keys(
            parse_json(data, where), ("generation", "writes", "audit_offset", "audit_lines"), where
        )
        writes: dict[str, tuple[bytes, int | None] | None] = {}
        for rel, entry in doc["writes"].items():
            writes[rel] = (
                None if entry is None else (base64.b64decode(entry["data"]), entry["mtime_ns"])
            )
        return _Stored(
            str(doc["generation"]),
            writes,
            doc["audit_offset"],
            base64.b64decode(doc["audit_lines"]),
        )


@dataclass(frozen=True)
class _Stored:
    """A journal as read back (times as nanoseconds, as they are applied)."""

    generation: str
    writes: Mapping[str, tuple[bytes, int | None] | None]
    audit_offset: int | None
    audit_lines: bytes


def diff(old: Mapping[str, Content], new: Mapping[str, Content]) -> Journal:
    """The journal that turns the directory ``old`` into ``new`` (the same when nothing changes).

    The audit log is appended to when its new content extends the old one.
    """
    writes: dict[str, Content | None] = {rel: None for rel in old if rel not in new}
    offset: int | None = None
    lines = b""
    for rel, content in new.items():
        before = old.get(rel)
        unchanged = content.mtime is None or (before is not None and content.mtime == before.mtime)
        if before is not None and before.data == content.data and unchanged:
            continue
        if rel == AUDIT_LOG_PATH and before is not None and content.data.startswith(before.data):
            offset, lines = len(before.data), content.data[len(before.data) :]
            continue
        writes[rel] = content
    return Journal(secrets.token_hex(16), writes, offset, lines)


def _write_tmp(root: Path, data: bytes) -> Path:
    tmp_dir = _full(root, _TMP_DIR)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=tmp_dir, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return Path(name)


def _replace(root: Path, rel: str, data: bytes, ns: int | None) -> None:
    """Replace ``rel`` with ``data`` by renaming a fsynced temporary file over it."""
    target = _full(root, rel)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_tmp(root, data)
    if ns is not None:
        os.utime(tmp, ns=(ns, ns))
    os.replace(tmp, target)
    fsync_dir(target.parent)


def _remove(root: Path, rel: str) -> None:
    """Remove ``rel`` and the folders it leaves empty (never ``root`` itself)."""
    target = _full(root, rel)
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    folder = target.parent
    while folder != root:
        try:
            folder.rmdir()
        except OSError:
            break
        folder = folder.parent
    fsync_dir(folder)


def _append_audit(root: Path, offset: int, lines: bytes) -> None:
    """Cut the audit log back to ``offset`` bytes and append ``lines`` (idempotent)."""
    target = _full(root, AUDIT_LOG_PATH)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.ftruncate(fd, offset)
        os.lseek(fd, offset, os.SEEK_SET)
        view = memoryview(lines)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _apply(root: Path, stored: _Stored) -> None:
    for rel, write in sorted(stored.writes.items()):
        if write is None:
            _remove(root, rel)
        else:
            _replace(root, rel, *write)
    if stored.audit_offset is not None:
        _append_audit(root, stored.audit_offset, stored.audit_lines)
    _replace(root, GENERATION_PATH, stored.generation.encode("ascii"), None)
    _full(root, LIVE_JOURNAL_PATH).unlink()
    fsync_dir(_full(root, LIVE_DIR))


def commit(root: Path, journal: Journal) -> None:
    """Make ``journal`` durable, then apply it (the caller holds the lock)."""
    _replace(root, LIVE_JOURNAL_PATH, journal.to_bytes(), None)
    _apply(root, journal.stored())


def recover(root: Path) -> bool:
    """Finish a change a killed writer left, and remove its temporary files; whether one was.

    The caller holds the lock.
    """
    shutil.rmtree(_full(root, _TMP_DIR), ignore_errors=True)
    try:
        data = _full(root, LIVE_JOURNAL_PATH).read_bytes()
    except FileNotFoundError:
        return False
    _apply(root, Journal.from_bytes(data))
    return True


def generation(root: Path) -> str:
    """The directory's generation token (``""`` before the first change)."""
    try:
        return _full(root, GENERATION_PATH).read_text("ascii")
    except FileNotFoundError:
        return ""
