"""The on-disk format of one :class:`~firefly_orm.FileStore` namespace file, and its parsed state.

A namespace file is an append-only log of JSON lines (ASCII, one object a line):

* a **header** line: ``{"format": "firefly_orm.file_log", "version": 1,
  "namespace": ..., "generation": <random id of this file>, "base": [<generation>,
  <offset>] or null, "snapshot": <bytes>}``;
* **record** lines, one per commit that changed the namespace: ``{"id": <commit
  id>, "clear": true, "del": [<entry ids>], "put": [<MemoryEntry.to_json_dict()>,
  ...]}`` (absent parts omitted), applied in that order: clear, deletes, puts.

A file is only ever created whole (temporary file, fsync, :func:`os.replace`),
then grown by appending one record line per commit (one ``write``, then
``fsync``).  A process killed in the middle of an append leaves a last line
without its newline, or one that is not JSON: that commit was never
acknowledged, so the line is ignored by readers and cut off by the next writer
(who holds the lock).  Any other bad line is corruption
(:class:`~firefly_orm.errors.StoreCorruptedError` naming the file).

Compaction rewrites the file as a header plus one record holding every live
entry (the *snapshot*, ``snapshot`` bytes long) once the dead records outweigh
the live ones (and at least :data:`COMPACT_MIN_BYTES`), so the file stays
proportional to the live data and each commit costs O(its change), amortised.
``base`` names the generation and offset the snapshot was taken at: a process
whose parsed state is exactly there adopts the new file without re-reading the
snapshot.

:class:`NamespaceLog` is a parsed file: the entries (an
:class:`~firefly_orm.file_store._index.EntryIndex`) plus where the parse stopped.
:func:`read_state` brings one up to date by reading only what was appended since
(or everything, when the file was replaced by someone else).  Files written by
earlier versions (one JSON object mapping ``entry_id`` to the entry) are read as
*legacy* files and converted by the first write.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firefly_orm.entry import MemoryEntry, validate_entry, validate_namespace
from firefly_orm.errors import StoreCorruptedError, StoreError
from firefly_orm.file_store._index import EntryIndex

__all__ = [
    "COMPACT_MIN_BYTES",
    "DATA_FILE",
    "FORMAT",
    "Counters",
    "Edit",
    "NamespaceLog",
    "counters",
    "create_log",
    "decode_record",
    "encode_record",
    "fsync_dir",
    "new_id",
    "orphan_temps",
    "namespace_file_name",
    "read_state",
    "write_new_file",
]

FORMAT = "firefly_orm.file_log"  # the on-disk format's name (the module's former path)
_VERSION = 1
#: Files smaller than this many dead bytes are never compacted.
COMPACT_MIN_BYTES = 64 * 1024
#: Temporary files without a writer's pid (earlier versions) are orphans after this long.
_ORPHAN_AGE_SECONDS = 3600.0

_PREFIX_CHARS = 48
_HASH_HEX = 32
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
#: Names of namespace files.
DATA_FILE = re.compile(r"[A-Za-z0-9_-]{1,48}-[0-9a-f]{32}\.json")
_TEMP_WITH_PID = re.compile(r"\.(?P<target>.+)\.(?P<pid>[0-9]+)\.[a-z0-9_]+\.tmp")
_TEMP_LEGACY = re.compile(r"\.[A-Za-z0-9_-]{1,48}-[0-9a-f]{32}\.json\.[a-z0-9_]+\.tmp")
_HEADER_START = b'{"format":'
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
_APPEND_FLAGS = (
    os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
)


def namespace_file_name(namespace: str) -> str:
    """The file name (no directory) that holds ``namespace``.

    Args:
        namespace: Any namespace :func:`~firefly_orm.entry.validate_namespace`
            accepts.

    Returns:
        ``<prefix>-<hash>.json`` as described in :mod:`firefly_orm.file_store`.

    Raises:
        EntryValidationError: If ``namespace`` is not a valid namespace.
    """
    validate_namespace(namespace)
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()
    prefix = _UNSAFE.sub("_", namespace[:_PREFIX_CHARS])
    if prefix.startswith("-"):  # keep names from looking like command-line options
        prefix = "_" + prefix[1:]
    return f"{prefix}-{digest[:_HASH_HEX]}.json"


@dataclass
class Counters:
    """What namespace files cost this process (cumulative; for tests and diagnostics).

    Attributes:
        bytes_parsed: Bytes of namespace files decoded (headers and records).
        entries_decoded: Entries built from namespace files.
        bytes_written: Bytes written to namespace files (appends and rewrites).
    """

    bytes_parsed: int = 0
    entries_decoded: int = 0
    bytes_written: int = 0


#: The process-wide :class:`Counters`.
counters = Counters()


def new_id() -> str:
    """A fresh random id (32 hex digits) for a commit or a file generation."""
    return uuid.uuid4().hex


def _dumps(value: Any) -> bytes:
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.encode("ascii")


# --------------------------------------------------------------------------- records


@dataclass
class Edit:
    """One commit's change to one namespace: clear it, then delete, then put."""

    clear: bool = False
    deletes: list[str] = field(default_factory=list)
    puts: list[MemoryEntry] = field(default_factory=list)


def encode_record(commit_id: str | None, edit: Edit) -> bytes:
    """The record line (newline included) of ``edit``."""
    record: dict[str, Any] = {"id": commit_id}
    if edit.clear:
        record["clear"] = True
    if edit.deletes:
        record["del"] = edit.deletes
    if edit.puts:
        record["put"] = [entry.to_json_dict() for entry in edit.puts]
    return _dumps(record) + b"\n"


def decode_record(data: Any, namespace: str) -> tuple[str | None, Edit]:
    """The commit id and the :class:`Edit` of a decoded record line (checked)."""
    if not isinstance(data, dict) or not set(data) <= {"id", "clear", "del", "put"}:
        raise ValueError("a record must be an object with id, clear, del and put")
    commit_id = data.get("id")
    clear = data.get("clear", False)
    deletes = data.get("del", [])
    puts = data.get("put", [])
    if commit_id is not None and not isinstance(commit_id, str):
        raise ValueError("a record id must be a string")
    if not isinstance(clear, bool) or not isinstance(deletes, list) or not isinstance(puts, list):
        raise ValueError("bad record fields")
    if not all(isinstance(entry_id, str) for entry_id in deletes):
        raise ValueError("deleted ids must be strings")
    return commit_id, Edit(clear, deletes, [_decode_entry(item, namespace) for item in puts])


def _decode_entry(item: Any, namespace: str | None) -> MemoryEntry:
    if not isinstance(item, dict):
        raise ValueError("an entry is not a JSON object")
    entry = MemoryEntry.from_dict(item)
    validate_entry(entry, entry.namespace)
    counters.entries_decoded += 1
    if namespace is not None and entry.namespace != namespace:
        raise ValueError(
            f"entry {entry.entry_id!r} belongs to namespace {entry.namespace!r}, not {namespace!r}"
        )
    return entry


def _encode_header(namespace: str, generation: str, base: list[Any] | None, snapshot: int) -> bytes:
    header = {
        "format": FORMAT,
        "version": _VERSION,
        "namespace": namespace,
        "generation": generation,
        "base": base,
        "snapshot": snapshot,
    }
    return _dumps(header) + b"\n"


# --------------------------------------------------------------------------- parsed state


class NamespaceLog:
    """One namespace file as parsed, and where the parse stopped.

    Valid while the file keeps its identity and header; bytes appended since are
    read by :func:`read_state`.

    Attributes:
        path: The file.
        namespace: Its namespace (``None`` for an empty legacy file read without one).
        index: The entries, expired ones included.
        identity: ``(st_dev, st_ino)`` of the file parsed.
        header: Its header line (empty for a legacy file).
        generation: The header's generation (``None`` for a legacy file).
        offset: End of the last good line (a legacy file: its size).
        size: The file's size when last read; more than ``offset`` means a torn tail.
        last_commit: Id of the last record applied.
        live_bytes: Estimated bytes of the live entries in the file.
    """

    def __init__(self, path: Path, namespace: str | None) -> None:
        self.path = path
        self.namespace = namespace
        self.index = EntryIndex()
        self.identity: tuple[int, int] = (0, 0)
        self.header = b""
        self.generation: str | None = None
        self.offset = 0
        self.size = 0
        self.last_commit: str | None = None
        self.live_bytes = 0
        self._sizes: dict[str, int] = {}

    @property
    def legacy(self) -> bool:
        """Whether the file is in the format of earlier versions (no header)."""
        return self.generation is None

    def remaining_after(self, edit: Edit) -> int:
        """How many entries the namespace holds once ``edit`` is applied."""
        index = self.index
        deleted = {i for i in edit.deletes if i in index}
        count = 0 if edit.clear else len(index) - len(deleted)
        new = (
            e for e in edit.puts if edit.clear or e.entry_id not in index or e.entry_id in deleted
        )
        return count + sum(1 for _ in new)

    def needs_compaction(self) -> bool:
        """Whether dead records outweigh the live entries (and the minimum)."""
        dead = self.offset - len(self.header) - self.live_bytes
        return not self.legacy and dead > max(self.live_bytes, COMPACT_MIN_BYTES)

    def apply(self, commit_id: str | None, edit: Edit, line_bytes: int) -> None:
        """Apply a decoded record of ``line_bytes`` bytes to the entries."""
        if edit.clear:
            self.index.clear()
            self._sizes.clear()
            self.live_bytes = 0
        share = line_bytes // max(1, len(edit.deletes) + len(edit.puts))
        for entry_id in edit.deletes:
            if self.index.remove(entry_id):
                self.live_bytes -= self._sizes.pop(entry_id, 0)
        for entry in edit.puts:
            self.index.put(entry)
            self.live_bytes += share - self._sizes.get(entry.entry_id, 0)
            self._sizes[entry.entry_id] = share
        if commit_id is not None:
            self.last_commit = commit_id

    def apply_line(self, line: bytes) -> None:
        """Decode and apply one complete record line (newline included)."""
        commit_id, edit = decode_record(json.loads(line), self._namespace())
        counters.bytes_parsed += len(line)
        self.apply(commit_id, edit, len(line))
        self.offset += len(line)
        self.size = max(self.size, self.offset)

    def _namespace(self) -> str:
        if self.namespace is None:  # pragma: no cover - log files always name it
            raise ValueError("namespace unknown")
        return self.namespace

    # ------------------------------------------------------------------ writing
    def append(self, line: bytes) -> None:
        """Append one record line, fsynced, then apply it (the caller holds the lock).

        A torn tail left by a killed writer is cut off first.  If the write or
        the fsync fails, the file is cut back to where it was.

        Raises:
            StoreError: The file could not be written (it is left as it was).
        """
        try:
            fd = os.open(self.path, _APPEND_FLAGS)
        except OSError as exc:
            raise StoreError(f"cannot write memory file {self.path}: {exc}") from exc
        try:
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != self.identity:
                raise StoreError(f"memory file {self.path} was replaced while locked")
            if info.st_size != self.offset:
                os.ftruncate(fd, self.offset)
            try:
                _write_all(fd, line)
                os.fsync(fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self.offset)
                raise
        except OSError as exc:
            raise StoreError(f"cannot write memory file {self.path}: {exc}") from exc
        finally:
            os.close(fd)
        counters.bytes_written += len(line)
        self.size = self.offset
        self.apply_line(line)

    def rewrite(self) -> None:
        """Replace the file with a snapshot of the entries (a new generation).

        Used to compact and to convert a legacy file; the entries do not change.

        Raises:
            StoreError: The new file could not be written (the old one stays).
        """
        namespace = self._namespace()
        body = encode_record(self.last_commit, Edit(puts=list(self.index.values())))
        base = None if self.legacy else [self.generation, self.offset]
        generation = new_id()
        header = _encode_header(namespace, generation, base, len(body))
        identity = write_new_file(self.path, header + body)
        counters.bytes_written += len(header) + len(body)
        self.identity, self.header, self.generation = identity, header, generation
        self.offset = self.size = len(header) + len(body)
        self._reset_sizes(len(body))

    def _reset_sizes(self, body_bytes: int) -> None:
        share = body_bytes // max(1, len(self.index))
        self._sizes = dict.fromkeys(self.index.ids(), share)
        self.live_bytes = share * len(self.index)


def create_log(path: Path, namespace: str, line: bytes) -> None:
    """Create the namespace file ``path`` holding one record line (atomically, durably).

    Raises:
        StoreError: Nothing could be written.
    """
    header = _encode_header(namespace, new_id(), None, 0)
    write_new_file(path, header + line)
    counters.bytes_written += len(header) + len(line)


# --------------------------------------------------------------------------- reading


def read_state(
    path: Path, namespace: str | None, cached: NamespaceLog | None = None
) -> NamespaceLog | None:
    """The current state of the namespace file at ``path`` (``None``: no file).

    ``cached`` (a state read earlier from the same path) is brought up to date
    and returned when the file is still the one it was read from (only the bytes
    appended since are parsed) or a compaction of exactly that state; otherwise
    the file is parsed in full.  The caller holds the file's lock.

    Args:
        path: The namespace file.
        namespace: The namespace it must hold, or ``None`` to accept the one it
            names (if the file name matches it).
        cached: An earlier state of the same path, or ``None``.

    Raises:
        StoreCorruptedError: The file is unreadable or corrupt (it is left as is).
    """
    fd = open_to_read(path, "memory file")
    if fd is None:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StoreCorruptedError(f"cannot read memory file {path}: not a regular file")
        return _read_open(fd, path, namespace, cached, (info.st_dev, info.st_ino), info.st_size)
    except StoreCorruptedError:
        raise
    except OSError as exc:
        raise StoreCorruptedError(f"cannot read memory file {path}: {exc}") from exc
    except Exception as exc:
        raise StoreCorruptedError(f"corrupt memory file {path}: {exc}") from exc
    finally:
        os.close(fd)


def _read_open(
    fd: int,
    path: Path,
    namespace: str | None,
    cached: NamespaceLog | None,
    identity: tuple[int, int],
    size: int,
) -> NamespaceLog:
    if (
        cached is not None
        and not cached.legacy
        and cached.identity == identity
        and size >= cached.offset
        and _read_at(fd, 0, len(cached.header)) == cached.header
    ):
        _read_tail(fd, cached, size)
        return cached
    first = _read_at(fd, 0, min(size, 1 << 16))
    if not first.startswith(_HEADER_START):
        return _read_legacy(fd, path, namespace, identity, size)
    end = first.find(b"\n")
    if end < 0:
        first = _read_at(fd, 0, size)
        end = first.find(b"\n")
        if end < 0:
            raise ValueError("the header line is incomplete")
    header_line = first[: end + 1]
    header = json.loads(header_line)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        return _read_legacy(fd, path, namespace, identity, size)
    if header.get("version") != _VERSION:
        raise ValueError(f"format version {header.get('version')!r} is not supported")
    owner = header.get("namespace")
    generation = header.get("generation")
    snapshot = header.get("snapshot")
    if not isinstance(owner, str) or not isinstance(generation, str):
        raise ValueError("the header lacks a namespace or a generation")
    if not isinstance(snapshot, int) or snapshot < 0:
        raise ValueError("the header has a bad snapshot size")
    _check_owner(path, namespace, owner)
    counters.bytes_parsed += len(header_line)
    base = header.get("base")
    adopt = (
        cached is not None
        and not cached.legacy
        and cached.namespace == owner
        and base == [cached.generation, cached.offset]
        and len(header_line) + snapshot <= size
    )
    state = cached if adopt and cached is not None else NamespaceLog(path, owner)
    state.identity, state.header, state.generation = identity, header_line, generation
    state.offset = state.size = len(header_line)
    if adopt:
        state.offset = state.size = len(header_line) + snapshot
    _read_tail(fd, state, size)
    return state


def _check_owner(path: Path, namespace: str | None, owner: str) -> None:
    if namespace is not None and owner != namespace:
        raise ValueError(f"it holds namespace {owner!r}, not {namespace!r}")
    if namespace is None and namespace_file_name(owner) != path.name:
        raise ValueError(f"namespace {owner!r} does not belong in this file")


def _read_tail(fd: int, state: NamespaceLog, size: int) -> None:
    """Apply the complete lines after ``state.offset``; a torn or unparsable last line is left."""
    state.size = size
    if size <= state.offset:
        return
    data = _read_at(fd, state.offset, size - state.offset)
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return  # a torn last line (no newline): an unacknowledged commit
        line = data[start : end + 1]
        try:
            parsed = json.loads(line)
        except ValueError:
            if end + 1 == len(data):
                return  # the last line is not JSON: torn by a crash (see module docstring)
            raise ValueError(f"line at byte {state.offset} is not JSON") from None
        commit_id, edit = decode_record(parsed, state._namespace())
        counters.bytes_parsed += len(line)
        state.apply(commit_id, edit, len(line))
        state.offset += len(line)
        start = end + 1


def _read_legacy(
    fd: int, path: Path, namespace: str | None, identity: tuple[int, int], size: int
) -> NamespaceLog:
    """A file of earlier versions: one JSON object mapping entry_id to entry."""
    raw = _read_at(fd, 0, size)
    data: Any = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    counters.bytes_parsed += len(raw)
    state = NamespaceLog(path, namespace)
    for entry_id, item in data.items():
        entry = _decode_entry(item, state.namespace)
        if entry.entry_id != entry_id:
            raise ValueError(f"entry {entry_id!r} has entry_id {entry.entry_id!r}")
        if state.namespace is None:
            _check_owner(path, None, entry.namespace)
            state.namespace = entry.namespace
        state.index.put(entry)
    state.identity = identity
    state.offset = state.size = size
    state._reset_sizes(size)
    return state


def _read_at(fd: int, offset: int, length: int) -> bytes:
    os.lseek(fd, offset, os.SEEK_SET)
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.read(fd, length)
        if not chunk:
            break
        chunks.append(chunk)
        length -= len(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------- writing


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_new_file(path: Path, content: bytes) -> tuple[int, int]:
    """Create or replace ``path`` with ``content`` atomically and durably.

    The content goes to a temporary file beside it (named after the target and
    this process's pid, so :func:`orphan_temps` can tell a dead writer's), which
    is fsynced and moved over ``path``; the directory is then fsynced.

    Returns:
        ``(st_dev, st_ino)`` of the new file.

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
            _write_all(fd, content)
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
    return info.st_dev, info.st_ino


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
