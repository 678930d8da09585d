"""The on-disk format of one :class:`~firefly_orm.FileStore` namespace, and its parsed state.

A namespace is two files (names in :mod:`firefly_orm.file_store._files`):

* the **snapshot** ``<name>.json``: one JSON document, the object
  ``{entry_id: MemoryEntry.to_json_dict(), ...}`` (the upstream FileStore's
  shape: ``json.load`` reads it), one entry a line, in ``(created_at,
  entry_id)`` order.  It is only ever written whole (temporary file, fsync,
  :func:`os.replace`), so it is always a complete, valid document;
* the **commit log** ``<name>.log.jsonl``: the commits since the snapshot, as
  JSON lines: a **header** line ``{"format": "firefly_orm.file_log",
  "version": 2, "namespace": ..., "generation": <random id of this log>,
  "base": [<generation>, <offset>] or null, "snapshot": {"sha256": <hex>,
  "bytes": <size>}}`` then one **record** line per commit, ``{"id": <commit
  id>, "clear": true, "del": [<entry ids>], "put": [<entries>]}`` (absent
  parts omitted), applied in that order: clear, deletes, puts.

The log belongs to the snapshot whose SHA-256 its header names; a log naming
another snapshot is *stale* and ignored (a compaction that stopped between
its two renames, see below).  No log means no commit since the snapshot.
A log is created whole (header only) and grown by appending one record line
per commit (one ``write``, then ``fsync``).  A process killed in the middle of
an append leaves a last line without its newline, or one that is not JSON:
that commit was never acknowledged, so the line is ignored by readers and cut
off by the next writer (who holds the lock).  Any other bad line is corruption
(:class:`~firefly_orm.errors.StoreCorruptedError` naming the file).

**Compaction** folds the log into the snapshot: the entries are written as the
new snapshot (rename), then a new header-only log naming it replaces the old
log (rename).  Stopped between the two, the old log names the old snapshot: it
is stale, and the new snapshot already holds all of it.  A namespace is
compacted once its dead bytes (replaced or deleted entries in the snapshot
plus the log) outweigh its live entries, or its log outgrows its snapshot
(either past :data:`COMPACT_MIN_BYTES`), so the files stay proportional to
the live data, the snapshot holds most of it, and each commit costs O(its
change), amortised; :meth:`FileStore.compact
<firefly_orm.file_store.FileStore.compact>` (and ``close``) compacts on request.
``base`` names the log generation and offset a compaction was taken at: a
process whose parsed state is exactly there adopts the new files without
parsing the snapshot (it only checks its SHA-256).

A namespace is created by writing its snapshot (after removing any log left
by an earlier namespace of that name), and removed snapshot first, then log.

Files of earlier versions are read: a ``.json`` snapshot alone is the format of
the first versions; a ``.json`` that is itself a log (a version-1 header line
then records, the format of the previous version) is read as such
(:attr:`NamespaceLog.old_format`) and converted into a snapshot (plus log) when
the store is opened or the namespace is next written.

:class:`NamespaceLog` is a parsed namespace: the entries (an
:class:`~firefly_orm.file_store._index.EntryIndex`) plus where the parse
stopped.  :func:`read_state` brings one up to date by reading only what was
appended since (or everything, when the files were replaced by someone else).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firefly_orm.entry import MemoryEntry, validate_entry
from firefly_orm.errors import StoreError
from firefly_orm.file_store._files import (
    DATA_FILE,
    counters,
    dumps,
    fsync_dir,
    log_path_for,
    new_id,
    write_all,
    write_new_file,
)
from firefly_orm.file_store._index import EntryIndex

__all__ = [
    "COMPACT_MIN_BYTES",
    "DATA_FILE",
    "FORMAT",
    "HEADER_START",
    "LOG_VERSION",
    "OLD_VERSION",
    "Edit",
    "NamespaceLog",
    "counters",
    "create_namespace",
    "decode_entry",
    "decode_record",
    "encode_record",
    "encode_snapshot",
    "fsync_dir",
    "remove_namespace_files",
]

FORMAT = "firefly_orm.file_log"  # the on-disk format's name (the module's former path)
LOG_VERSION = 2  # a log beside its snapshot
OLD_VERSION = 1  # the previous version: the whole namespace as a log in the .json file
#: Namespaces with fewer dead bytes than this are never compacted.
COMPACT_MIN_BYTES = 64 * 1024

#: How a log (a header line) starts; a snapshot (``{`` then a newline) never does.
HEADER_START = b'{"format":'
_APPEND_FLAGS = (
    os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
)


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
    return dumps(record) + b"\n"


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
    return commit_id, Edit(clear, deletes, [decode_entry(item, namespace) for item in puts])


def decode_entry(item: Any, namespace: str | None) -> MemoryEntry:
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


def encode_snapshot(entries: Iterable[MemoryEntry]) -> bytes:
    """The snapshot document of ``entries``: ``{entry_id: to_json_dict(), ...}``, one a line."""
    items = [dumps(entry.entry_id) + b": " + dumps(entry.to_json_dict()) for entry in entries]
    return b"{\n" + b",\n".join(items) + b"\n}\n" if items else b"{}\n"


def _encode_header(
    namespace: str, generation: str, base: list[Any] | None, sha: str, size: int
) -> bytes:
    header = {
        "format": FORMAT,
        "version": LOG_VERSION,
        "namespace": namespace,
        "generation": generation,
        "base": base,
        "snapshot": {"sha256": sha, "bytes": size},
    }
    return dumps(header) + b"\n"


# --------------------------------------------------------------------------- parsed state


class NamespaceLog:
    """One namespace as parsed (snapshot plus log), and where the parse stopped.

    Valid while the snapshot keeps its identity and the log its identity and
    header; bytes appended to the log since are read by :func:`read_state`.

    Attributes:
        path: The snapshot (``<name>.json``; its lock and journal name).
        log_path: The commit log beside it.
        namespace: Its namespace (``None`` for an empty snapshot read without one).
        index: The entries, expired ones included.
        old_format: Whether ``path`` is a log of the previous version (to convert).
        snapshot_identity: ``(st_dev, st_ino, st_size, st_mtime_ns)`` of the snapshot.
        snapshot_sha: SHA-256 (hex) of the snapshot's bytes.
        snapshot_bytes: Its size.
        identity: ``(st_dev, st_ino)`` of the log parsed (of ``path`` if ``old_format``).
        header: Its header line (empty: no log for this snapshot).
        generation: The log's generation (``None``: no log for this snapshot).
        offset: End of the last good line of the log.
        size: The log's size when last read; more than ``offset`` means a torn tail.
        live_bytes: Estimated bytes of the live entries.
    """

    def __init__(self, path: Path, namespace: str | None) -> None:
        self.path = path
        self.log_path = log_path_for(path)
        self.namespace = namespace
        self.index = EntryIndex()
        self.old_format = False
        self.snapshot_identity: tuple[int, int, int, int] = (0, 0, 0, 0)
        self.snapshot_sha = ""
        self.snapshot_bytes = 0
        self.identity: tuple[int, int] = (0, 0)
        self.header = b""
        self.generation: str | None = None
        self.offset = 0
        self.size = 0
        self.live_bytes = 0
        self._sizes: dict[str, int] = {}

    @property
    def mark(self) -> str:
        """What identifies the namespace's files now (a commit journal records it)."""
        return self.generation if self.generation is not None else "snapshot:" + self.snapshot_sha

    @property
    def log_bytes(self) -> int:
        """Bytes of records in the log (the commits since the snapshot)."""
        return self.offset - len(self.header) if self.generation is not None else 0

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
        """Whether the dead bytes outweigh the live ones, or the log the snapshot.

        Either way past :data:`COMPACT_MIN_BYTES`.  A compaction writes about
        what the appends since the last one wrote (at most twice as much), so
        appends stay O(their size), amortised, and the snapshot holds at least
        about half of the namespace.
        """
        dead = self.snapshot_bytes + self.log_bytes - self.live_bytes
        return dead > max(self.live_bytes, COMPACT_MIN_BYTES) or self.log_bytes > max(
            self.snapshot_bytes, COMPACT_MIN_BYTES
        )

    def apply(self, edit: Edit, line_bytes: int) -> None:
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

    def apply_lines(self, data: bytes) -> None:
        """Apply the complete record lines of ``data`` (read at :attr:`offset`).

        A last line without its newline, or one that is not JSON, is a commit
        torn by a crash: it is left (not applied, :attr:`offset` stays before it).
        """
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            line = data[start : end + 1]
            try:
                parsed = json.loads(line)
            except ValueError:
                if end + 1 == len(data):
                    return
                raise ValueError(f"line at byte {self.offset} is not JSON") from None
            _, edit = decode_record(parsed, self._namespace())
            counters.bytes_parsed += len(line)
            self.apply(edit, len(line))
            self.offset += len(line)
            start = end + 1

    def _namespace(self) -> str:
        if self.namespace is None:
            raise ValueError("the namespace of this file is unknown")
        return self.namespace

    # ------------------------------------------------------------------ writing
    def append(self, line: bytes) -> None:
        """Append one record line to the log, fsynced, then apply it (under the lock).

        The log must exist (:meth:`ensure_log`).  A torn tail left by a killed
        writer is cut off first.  If the write or the fsync fails, the log is
        cut back to where it was.

        Raises:
            StoreError: The log could not be written (it is left as it was).
        """
        if self.generation is None or self.old_format:
            raise StoreError(f"memory log {self.log_path} was not started")  # pragma: no cover
        try:
            fd = os.open(self.log_path, _APPEND_FLAGS)
        except OSError as exc:
            raise StoreError(f"cannot write memory log {self.log_path}: {exc}") from exc
        try:
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != self.identity:
                raise StoreError(f"memory log {self.log_path} was replaced while locked")
            if info.st_size != self.offset:
                os.ftruncate(fd, self.offset)
            try:
                write_all(fd, line)
                os.fsync(fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self.offset)
                raise
        except OSError as exc:
            raise StoreError(f"cannot write memory log {self.log_path}: {exc}") from exc
        finally:
            os.close(fd)
        counters.bytes_written += len(line)
        self.apply_lines(line)
        self.size = self.offset

    def ensure_log(self) -> None:
        """Start the log of the current snapshot if there is none (under the lock).

        A namespace in the previous version's format is converted first.

        Raises:
            StoreError: The log (or the converted snapshot) could not be written.
        """
        if self.old_format:
            self.compact()
        elif self.generation is None:
            self._start_log(None)

    def compact(self) -> None:
        """Write the entries as the new snapshot, then start an empty log naming it.

        Also converts a namespace in the previous version's format.  If the new
        log cannot be written the snapshot alone holds everything (the old log
        is stale); the next write starts a log.

        Raises:
            StoreError: A file could not be written (the namespace reads as before).
        """
        base = None if self.generation is None else [self.generation, self.offset]
        body = encode_snapshot(self.index.values())
        info = write_new_file(self.path, body)
        counters.bytes_written += len(body)
        self.old_format = False
        self.set_snapshot(info, hashlib.sha256(body).hexdigest())
        self.identity, self.header, self.generation = (0, 0), b"", None
        self.offset = self.size = 0
        self.reset_sizes(len(body))
        self._start_log(base)

    def _start_log(self, base: list[Any] | None) -> None:
        generation = new_id()
        header = _encode_header(
            self._namespace(), generation, base, self.snapshot_sha, self.snapshot_bytes
        )
        info = write_new_file(self.log_path, header)
        counters.bytes_written += len(header)
        self.attach(info, header, generation)

    def attach(self, info: os.stat_result, header: bytes, generation: str) -> None:
        """Take the log whose file is ``info`` and header line ``header`` as this state's."""
        self.identity = (info.st_dev, info.st_ino)
        self.header, self.generation = header, generation
        self.offset = self.size = len(header)

    def set_snapshot(self, info: os.stat_result, sha: str) -> None:
        """Record the snapshot this state now reflects (its ``fstat`` and SHA-256)."""
        self.snapshot_identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        self.snapshot_sha, self.snapshot_bytes = sha, info.st_size

    def reset_sizes(self, body_bytes: int) -> None:
        """Spread ``body_bytes`` (the snapshot's size) over the entries as their live bytes."""
        share = body_bytes // max(1, len(self.index))
        self._sizes = dict.fromkeys(self.index.ids(), share)
        self.live_bytes = share * len(self.index)


def create_namespace(path: Path, namespace: str, line: bytes) -> None:
    """Create the namespace whose snapshot is ``path`` from one record line (under the lock).

    A log left beside ``path`` by an earlier namespace of that name is removed
    first, so it can never be taken for this snapshot's.

    Raises:
        StoreError: Nothing could be written.
    """
    _, edit = decode_record(json.loads(line), namespace)
    _unlink(log_path_for(path))
    puts = sorted(edit.puts, key=lambda entry: (entry.created_at, entry.entry_id))
    body = encode_snapshot(puts)
    write_new_file(path, body)
    counters.bytes_written += len(body)


def remove_namespace_files(path: Path) -> None:
    """Remove a namespace: its snapshot, then its log (durably, in that order).

    Stopped between the two, the log is left without a snapshot: the namespace
    does not exist, and creating it again removes that log first.

    Raises:
        StoreError: A file could not be removed.
    """
    _unlink(path)
    _unlink(log_path_for(path))


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot remove memory file {path}: {exc}") from exc
    fsync_dir(path.parent)
