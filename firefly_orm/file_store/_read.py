"""Reading one :class:`~firefly_orm.FileStore` namespace: snapshot, commit log, earlier formats.

The format is described in :mod:`firefly_orm.file_store._log`.
:func:`read_state` brings a parsed namespace up to date, reading only what was
appended to the log since it was last read when it can; errors name the file
they are about (the snapshot, or the log).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firefly_orm.errors import StoreCorruptedError
from firefly_orm.file_store._files import (
    counters,
    log_path_for,
    namespace_file_name,
    open_to_read,
    read_at,
)
from firefly_orm.file_store._log import (
    FORMAT,
    HEADER_START,
    LOG_VERSION,
    OLD_VERSION,
    NamespaceLog,
    decode_entry,
)

__all__ = ["is_old_format", "read_state"]


@dataclass(frozen=True)
class _Header:
    """A parsed log header line."""

    line: bytes
    namespace: str
    generation: str
    base: list[Any] | None
    sha: str
    size: int


def _parse_header(line: bytes, path: Path, namespace: str | None) -> _Header:
    data = json.loads(line)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("the header line is not a firefly_orm commit log header")
    if data.get("version") != LOG_VERSION:
        raise ValueError(f"format version {data.get('version')!r} is not supported")
    owner, generation = data.get("namespace"), data.get("generation")
    snapshot, base = data.get("snapshot"), data.get("base")
    if not isinstance(owner, str) or not isinstance(generation, str):
        raise ValueError("the header lacks a namespace or a generation")
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("sha256"), str):
        raise ValueError("the header does not name its snapshot")
    size = snapshot.get("bytes")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError("the header has a bad snapshot size")
    if base is not None and not (isinstance(base, list) and len(base) == 2):
        raise ValueError("the header has a bad base")
    _check_owner(path, namespace, owner)
    return _Header(line, owner, generation, base, snapshot["sha256"], size)


def _check_owner(path: Path, namespace: str | None, owner: str) -> None:
    if namespace is not None and owner != namespace:
        raise ValueError(f"it holds namespace {owner!r}, not {namespace!r}")
    if namespace is None and namespace_file_name(owner) != path.name:
        raise ValueError(f"namespace {owner!r} does not belong in this file")


def is_old_format(path: Path) -> bool:
    """Whether the ``.json`` file ``path`` starts like a log of the previous version."""
    fd = open_to_read(path, "memory file")
    if fd is None:
        return False
    try:
        return read_at(fd, 0, len(HEADER_START)) == HEADER_START
    finally:
        os.close(fd)


class _LogError(Exception):
    """A problem with the commit log (reported naming the log, not the snapshot)."""


@contextlib.contextmanager
def _in_log() -> Iterator[None]:
    try:
        yield
    except _LogError:
        raise
    except Exception as exc:
        raise _LogError(str(exc)) from exc


@dataclass
class _Opened:
    """The two files of a namespace, open."""

    fd: int
    info: os.stat_result
    log_fd: int | None
    log_info: os.stat_result | None

    @property
    def identity(self) -> tuple[int, int, int, int]:
        i = self.info
        return i.st_dev, i.st_ino, i.st_size, i.st_mtime_ns

    @property
    def log_identity(self) -> tuple[int, int]:
        i = self.log_info
        return (0, 0) if i is None else (i.st_dev, i.st_ino)

    @property
    def log_size(self) -> int:
        return 0 if self.log_info is None else self.log_info.st_size


def read_state(
    path: Path, namespace: str | None, cached: NamespaceLog | None = None
) -> NamespaceLog | None:
    """The current state of the namespace whose snapshot is ``path`` (``None``: there is none).

    ``cached`` (a state read earlier from the same path) is brought up to date
    and returned when its files are still the ones it was read from (only the
    bytes appended to the log since are parsed) or a compaction of exactly that
    state; otherwise both files are parsed in full.  The caller holds the lock.

    Args:
        path: The namespace's snapshot.
        namespace: The namespace it must hold, or ``None`` to accept the one it
            names (if the file name matches it).
        cached: An earlier state of the same path, or ``None``.

    Raises:
        StoreCorruptedError: A file is unreadable or corrupt (it is left as is).
    """
    log_path = log_path_for(path)
    fd = open_to_read(path, "memory file")
    if fd is None:
        return None
    log_fd: int | None = None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StoreCorruptedError(f"cannot read memory file {path}: not a regular file")
        log_fd = open_to_read(log_path, "memory log")
        log_info = None if log_fd is None else os.fstat(log_fd)
        if log_info is not None and not stat.S_ISREG(log_info.st_mode):
            raise StoreCorruptedError(f"cannot read memory log {log_path}: not a regular file")
        return _read_open(_Opened(fd, info, log_fd, log_info), path, namespace, cached)
    except StoreCorruptedError:
        raise
    except _LogError as exc:
        raise StoreCorruptedError(f"corrupt memory log {log_path}: {exc}") from exc
    except OSError as exc:
        raise StoreCorruptedError(f"cannot read memory file {path}: {exc}") from exc
    except Exception as exc:
        raise StoreCorruptedError(f"corrupt memory file {path}: {exc}") from exc
    finally:
        os.close(fd)
        if log_fd is not None:
            os.close(log_fd)


def _read_open(
    files: _Opened, path: Path, namespace: str | None, cached: NamespaceLog | None
) -> NamespaceLog:
    if cached is not None and (kept := _continue(files, path, cached)) is not None:
        return kept
    header = None
    if files.log_fd is not None:
        with _in_log():
            header = _read_header(files, path, namespace)
    if (
        cached is not None
        and header is not None
        and cached.generation is not None
        and cached.namespace == header.namespace
        and header.base == [cached.generation, cached.offset]
        and _sha(files) == header.sha
    ):
        # The snapshot is a compaction of exactly the cached state: adopt it unparsed.
        cached.old_format = False
        cached.set_snapshot(files.info, header.sha)
        cached.reset_sizes(files.info.st_size)
        _take_log(files, cached, header)
        return cached
    return _read_full(files, path, namespace, header)


def _continue(files: _Opened, path: Path, cached: NamespaceLog) -> NamespaceLog | None:
    """``cached`` brought up to date if its files are unchanged but for appends, else ``None``."""
    if cached.snapshot_identity != files.identity:
        return None
    if cached.old_format:
        return cached  # the same file, size and modification time: nothing was appended
    if cached.generation is not None:
        log_fd = files.log_fd
        if (
            log_fd is None
            or cached.identity != files.log_identity
            or files.log_size < cached.offset
            or read_at(log_fd, 0, len(cached.header)) != cached.header
        ):
            return None
        with _in_log():
            _read_tail(log_fd, cached, files.log_size)
        return cached
    if files.log_fd is not None:  # a log appeared beside the snapshot read without one
        with _in_log():
            header = _read_header(files, path, cached.namespace)
            if header.sha == cached.snapshot_sha:
                _take_log(files, cached, header)
    return cached


def _read_header(files: _Opened, path: Path, namespace: str | None) -> _Header:
    assert files.log_fd is not None
    first = read_at(files.log_fd, 0, min(files.log_size, 1 << 16))
    end = first.find(b"\n")
    if end < 0:
        first = read_at(files.log_fd, 0, files.log_size)
        end = first.find(b"\n")
        if end < 0:
            raise ValueError("the header line is incomplete")
    header = _parse_header(first[: end + 1], path, namespace)
    counters.bytes_parsed += end + 1
    return header


def _take_log(files: _Opened, state: NamespaceLog, header: _Header) -> None:
    assert files.log_fd is not None and files.log_info is not None
    if state.namespace is None:
        state.namespace = header.namespace
    elif state.namespace != header.namespace:
        raise _LogError(f"it holds namespace {header.namespace!r}, not {state.namespace!r}")
    state.attach(files.log_info, header.line, header.generation)
    with _in_log():
        _read_tail(files.log_fd, state, files.log_size)


def _read_tail(fd: int, state: NamespaceLog, size: int) -> None:
    """Apply the complete lines after ``state.offset``; a torn or unparsable last line is left."""
    state.size = size
    if size > state.offset:
        state.apply_lines(read_at(fd, state.offset, size - state.offset))


def _sha(files: _Opened) -> str:
    counters.bytes_hashed += files.info.st_size
    return hashlib.sha256(read_at(files.fd, 0, files.info.st_size)).hexdigest()


def _read_full(
    files: _Opened, path: Path, namespace: str | None, header: _Header | None
) -> NamespaceLog:
    data = read_at(files.fd, 0, files.info.st_size)
    if data.startswith(HEADER_START):
        old = _read_old_format(files, data, path, namespace)
        if old is not None:
            return old
    state = NamespaceLog(path, namespace)
    _load_snapshot(state, data, path)
    state.set_snapshot(files.info, hashlib.sha256(data).hexdigest())
    state.reset_sizes(len(data))
    if header is not None and header.sha == state.snapshot_sha:
        _take_log(files, state, header)
    return state


def _load_snapshot(state: NamespaceLog, data: bytes, path: Path) -> None:
    """Fill ``state`` from a snapshot: one JSON object mapping entry_id to entry."""
    document: Any = json.loads(data.decode("utf-8"))
    if not isinstance(document, dict):
        raise ValueError(f"expected a JSON object, got {type(document).__name__}")
    counters.bytes_parsed += len(data)
    for entry_id, item in document.items():
        entry = decode_entry(item, state.namespace)
        if entry.entry_id != entry_id:
            raise ValueError(f"entry {entry_id!r} has entry_id {entry.entry_id!r}")
        if state.namespace is None:
            _check_owner(path, None, entry.namespace)
            state.namespace = entry.namespace
        state.index.put(entry)


def _read_old_format(
    files: _Opened, data: bytes, path: Path, namespace: str | None
) -> NamespaceLog | None:
    """A ``.json`` written by the previous version (a log), or ``None`` if it is not one."""
    end = data.find(b"\n")
    header = json.loads(data if end < 0 else data[: end + 1])
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        return None  # a snapshot whose first entry id happens to be "format"
    if end < 0:
        raise ValueError("the header line is incomplete")
    if header.get("version") != OLD_VERSION:
        raise ValueError(f"format version {header.get('version')!r} is not supported")
    owner, generation = header.get("namespace"), header.get("generation")
    if not isinstance(owner, str) or not isinstance(generation, str):
        raise ValueError("the header lacks a namespace or a generation")
    _check_owner(path, namespace, owner)
    counters.bytes_parsed += end + 1
    state = NamespaceLog(path, owner)
    state.old_format = True
    state.snapshot_identity = files.identity
    state.identity = (files.info.st_dev, files.info.st_ino)
    state.header, state.generation = data[: end + 1], generation
    state.offset = end + 1
    state.apply_lines(data[end + 1 :])
    state.size = len(data)
    return state
