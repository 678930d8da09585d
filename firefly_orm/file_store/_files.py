"""File names and durable file primitives of :class:`~firefly_orm.FileStore`.

* :func:`namespace_file_name` / :func:`log_path_for`: where a namespace lives
  (its JSON snapshot ``<prefix>-<hash>.json`` and its commit log
  ``<prefix>-<hash>.log.jsonl``).
* :func:`write_new_file`: create or replace a file atomically and durably
  (temporary file, fsync, :func:`os.replace`, fsync of the directory).
* :func:`open_to_read`, :func:`read_at`, :func:`write_all`, :func:`fsync_dir`,
  :func:`remove_file`: the reads, writes and removals the format modules build
  on (links are not followed).
* :func:`orphan_temps`: temporary files whose writer is gone.
* :data:`counters`: what the namespace files cost this process (the
  deterministic proxies the cost tests read).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firefly_orm.entry import validate_namespace
from firefly_orm.errors import StoreCorruptedError, StoreError

__all__ = [
    "DATA_FILE",
    "LOG_FILE",
    "LOG_SUFFIX",
    "Counters",
    "counters",
    "dumps",
    "fsync_dir",
    "log_path_for",
    "namespace_file_name",
    "new_id",
    "open_to_read",
    "orphan_temps",
    "read_at",
    "remove_file",
    "write_all",
    "write_new_file",
]

_PREFIX_CHARS = 48
_HASH_HEX = 32
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
#: Names of namespace snapshots (the ``.json`` files).
DATA_FILE = re.compile(r"[A-Za-z0-9_-]{1,48}-[0-9a-f]{32}\.json")
#: What a namespace's commit log adds to its snapshot's name.
LOG_SUFFIX = ".log.jsonl"
#: Names of namespace commit logs.
LOG_FILE = re.compile(r"[A-Za-z0-9_-]{1,48}-[0-9a-f]{32}\.log\.jsonl")
#: Temporary files without a writer's pid (earlier versions) are orphans after this long.
_ORPHAN_AGE_SECONDS = 3600.0
_TEMP_WITH_PID = re.compile(r"\.(?P<target>.+)\.(?P<pid>[0-9]+)\.[a-z0-9_]+\.tmp")
_TEMP_LEGACY = re.compile(r"\.[A-Za-z0-9_-]{1,48}-[0-9a-f]{32}\.json\.[a-z0-9_]+\.tmp")
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)


def namespace_file_name(namespace: str) -> str:
    """The name (no directory) of the JSON snapshot that holds ``namespace``.

    Args:
        namespace: Any namespace :func:`~firefly_orm.entry.validate_namespace`
            accepts.

    Returns:
        ``<prefix>-<hash>.json`` as described in :mod:`firefly_orm.file_store`
        (its commit log is the same name with ``.log.jsonl`` for ``.json``).

    Raises:
        EntryValidationError: If ``namespace`` is not a valid namespace.
    """
    validate_namespace(namespace)
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()
    prefix = _UNSAFE.sub("_", namespace[:_PREFIX_CHARS])
    if prefix.startswith("-"):  # keep names from looking like command-line options
        prefix = "_" + prefix[1:]
    return f"{prefix}-{digest[:_HASH_HEX]}.json"


def log_path_for(snapshot: Path) -> Path:
    """The commit log beside the snapshot ``snapshot`` (``x.json`` -> ``x.log.jsonl``)."""
    return snapshot.with_name(snapshot.name.removesuffix(".json") + LOG_SUFFIX)


@dataclass
class Counters:
    """What namespace files cost this process (cumulative; for tests and diagnostics).

    Attributes:
        bytes_parsed: Bytes of namespace files decoded (snapshots, headers, records).
        entries_decoded: Entries built from namespace files.
        bytes_written: Bytes written to namespace files (appends and rewrites).
        bytes_hashed: Bytes of snapshots checked (SHA-256) without being parsed.
    """

    bytes_parsed: int = 0
    entries_decoded: int = 0
    bytes_written: int = 0
    bytes_hashed: int = 0


#: The process-wide :class:`Counters`.
counters = Counters()


def new_id() -> str:
    """A fresh random id (32 hex digits) for a commit or a log generation."""
    return uuid.uuid4().hex


def dumps(value: Any) -> bytes:
    """``value`` as compact, ASCII-only JSON (no NaN)."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.encode("ascii")


def read_at(fd: int, offset: int, length: int) -> bytes:
    """Up to ``length`` bytes of ``fd`` from ``offset`` (fewer at the end of the file)."""
    os.lseek(fd, offset, os.SEEK_SET)
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.read(fd, length)
        if not chunk:
            break
        chunks.append(chunk)
        length -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd``."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_new_file(path: Path, content: bytes) -> os.stat_result:
    """Create or replace ``path`` with ``content`` atomically and durably.

    The content goes to a temporary file beside it (named after the target and
    this process's pid, so :func:`orphan_temps` can tell a dead writer's), which
    is fsynced and moved over ``path``; the directory is then fsynced.

    Returns:
        The ``fstat`` of the new file (its identity, size and modification time).

    Raises:
        StoreError: Nothing could be written (``path`` is as it was, no temporary
            file is left).
    """
    try:
        fd, tmp_name = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp"
        )
    except OSError as exc:
        raise StoreError(f"cannot create a temporary file for {path}: {exc}") from exc
    try:
        try:
            write_all(fd, content)
            os.fsync(fd)
            info = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(tmp_name, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        if isinstance(exc, OSError):
            raise StoreError(f"cannot write memory file {path}: {exc}") from exc
        raise
    fsync_dir(path.parent)
    return info


def open_to_read(path: Path, what: str) -> int | None:
    """A read-only descriptor of ``path`` (a link is not followed), or ``None`` if it is gone.

    Raises:
        StoreCorruptedError: ``cannot read {what} {path}: ...`` (any other OS error).
    """
    try:
        return os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreCorruptedError(f"cannot read {what} {path}: {exc}") from exc


def fsync_dir(directory: Path) -> None:
    """Make renames and removals in ``directory`` durable (POSIX; elsewhere a no-op)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_file(path: Path, what: str) -> None:
    """Remove ``path`` durably (its directory fsynced); no error when it is already gone.

    Raises:
        StoreError: ``cannot remove {what} {path}: ...`` (any other OS error).
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot remove {what} {path}: {exc}") from exc
    fsync_dir(path.parent)


def orphan_temps(directory: Path) -> list[Path]:
    """Temporary files in ``directory`` that no live writer can still own.

    A temporary file carries its writer's pid: it is an orphan once that process
    is gone.  One from an earlier version (no pid) is an orphan after an hour.
    Removing a live writer's temporary file would only make its rename fail
    (nothing would be half-written), so a wrong guess cannot lose data.
    """
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found: list[Path] = []
    now = time.time()
    for name in names:
        if not name.endswith(".tmp"):
            continue
        match = _TEMP_WITH_PID.fullmatch(name)
        path = directory / name
        if match is not None:
            if not _alive(int(match["pid"])):
                found.append(path)
        elif _TEMP_LEGACY.fullmatch(name):
            with contextlib.suppress(OSError):
                if now - path.lstat().st_mtime > _ORPHAN_AGE_SECONDS:
                    found.append(path)
    return found


def _alive(pid: int) -> bool:
    if pid == os.getpid() or os.name != "posix":
        return True  # (on Windows, os.kill would terminate the process)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists (e.g. another user's), or cannot tell: keep its files
    return True
