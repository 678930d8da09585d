"""Interchange with Flyte's directory layout: export a workspace to a directory, import one back.

Flyte's agent ``MemoryStore`` keeps a workspace as a directory (its keyed
stores live under a path ending in the store's key)::

    messages.json                         the transcript: a JSON list of messages
    <path>                                each file, its bytes as written
    meta/<quote(path)>.json               per-file metadata: path, sha256, updated_at,
                                          updated_by, reason, bytes
    audit/log.jsonl                       one JSON object per change: ts, op, path,
                                          old_sha, new_sha, actor, reason, version_file
    versions/<quote(path)>/<ts>_<sha>.txt every kept version (``:`` in ts written ``-``)

where ``quote`` is percent-encoding with no safe character (``user/a.md`` ->
``user%2Fa.md``).  :func:`export_directory` writes a workspace in that layout,
which Flyte reads as it is; :func:`import_directory` reads a directory Flyte
wrote (or one exported here) into a workspace, all or nothing.

**Lossless.**  What Flyte's layout has no place for (the workspace key and
creation time, each file's kind and version count, the metadata of each kept
version, each message's time and whether it is a pydantic-ai message) goes in
one more file, ``meta/@workspace.json`` (a name ``quote`` never produces, so
it never shadows a file's metadata, and Flyte never reads it).  Times are
written with their microseconds.  Exporting, importing into another store and
exporting again gives the same directory, byte for byte; only the audit rows'
entry ids are new.  What the extra file does not describe (a directory Flyte
wrote, or what Flyte wrote into an exported one: a changed or new file, a new
version, appended messages) is read as Flyte leaves it: files are text when
they are UTF-8 (else binary) and count the audited writes since their last
delete, a file without metadata is dated by its modification time and written
by ``agent``, a version is attributed by the audit line naming it, appended
messages are dated by the import (after the others), and without the extra
file the directory's name is the workspace key.

**Checked first, nothing written on refusal.**  An import reads and checks the
whole directory before it opens a unit of work: symbolic links, anything that
is not a regular file or a directory, paths the workspace refuses (``..``,
reserved names in any letter case, control characters...), unexpected files
under ``audit/``, ``meta/`` or ``versions/``, metadata describing no file,
JSON that does not parse (or repeats a key), a sha256 or size that does not
match the bytes, and oversized files raise :class:`DirectoryLayoutError`
naming the offending entry.

**Safe writes.**  An export builds the directory under a temporary name next
to the target and renames it into place, so the target is either as it was or
complete.  A target that exists must be an empty directory, or (with
``overwrite=True``) a directory holding a workspace (a ``messages.json`` or
``meta/@workspace.json`` at its top), which is then replaced; anything else is
refused.  The new directory is readable by its owner only (mode 0700).

Both functions have ``async_`` twins: the database part is the store's own
(async) unit of work and the file I/O runs in a worker thread
(:class:`~firefly_orm.bridges.steps.CallOut`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Unpack
from urllib.parse import quote, unquote

from firefly_orm.artifacts.model import (
    DEFAULT_ACTOR,
    KINDS,
    MAX_FILE_BYTES,
    RESERVED_DIRS,
    TRANSCRIPT_PATH,
    ArtifactFile,
    AuditRecord,
    Body,
    TranscriptMessage,
    WorkspaceOptions,
    WorkspaceSnapshot,
    check_actor,
    check_path,
    check_reason,
    check_workspace_key,
    transcript_from_json,
)
from firefly_orm.artifacts.workspace import Artifacts, ArtifactWorkspace
from firefly_orm.bridges.steps import CallOut, Operation, arun, run
from firefly_orm.conversation.codec import (
    check_encoded,
    decode_raw_messages,
    encode_raw_messages,
)
from firefly_orm.entry import utcnow
from firefly_orm.errors import EntryValidationError

__all__ = [
    "AUDIT_LOG_PATH",
    "MAX_BOOKKEEPING_BYTES",
    "SIDECAR_PATH",
    "DirectoryLayoutError",
    "async_export_directory",
    "async_import_directory",
    "export_directory",
    "import_directory",
    "read_directory",
    "write_directory",
]

logger = logging.getLogger(__name__)

# RESERVED_DIRS is spelled once, in sorted order: ("audit", "meta", "versions").
_AUDIT_DIR, _META_DIR, _VERSIONS_DIR = RESERVED_DIRS
#: The audit log of the layout.
AUDIT_LOG_PATH = f"{_AUDIT_DIR}/log.jsonl"
#: What Flyte's layout has no place for (``quote`` never writes ``@``).
SIDECAR_PATH = f"{_META_DIR}/@workspace.json"
#: Tells the extra file apart from anything else; bumped when its meaning changes.
_SIDECAR_FORMAT = "firefly-orm artifact workspace"
_SIDECAR_VERSION = 1
#: The keys of a file's metadata, in the order Flyte writes them.
_META_KEYS = ("path", "sha256", "updated_at", "updated_by", "reason", "bytes")
#: The keys an audit line may have (``ts``, ``op`` and ``path`` are required).
_AUDIT_KEYS = frozenset(
    {"ts", "op", "path", "old_sha", "new_sha", "actor", "reason", "version_file", "source", "moved"}
)
_AUDIT_OPS = frozenset({"create", "update", "delete", "promote"})
#: A kept version's file name: ``<ts>_<sha256>[_<8 hex>].txt``, ``:`` in ts written ``-``.
_VERSION_NAME = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})T(?P<h>\d{2})-(?P<m>\d{2})-(?P<s>\d{2})(?P<frac>\.\d{1,6})?"
    r"(?P<tz>Z|[+-]\d{2}-\d{2})_(?P<sha>[0-9a-f]{64})(?:_(?P<salt>[0-9a-f]{8}))?\.txt"
)
_SHA = re.compile(r"[0-9a-f]{64}")
#: Longest file name a directory entry may have (bytes), on the file systems that matter.
_MAX_NAME_BYTES = 255
#: Largest bookkeeping file an import reads (the transcript, the audit log, metadata).
MAX_BOOKKEEPING_BYTES = 256 * 1024 * 1024
_CHUNK = 1 << 20
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class DirectoryLayoutError(EntryValidationError):
    """A directory is not a workspace in Flyte's layout, or cannot hold this one; nothing written.

    ``field`` (and :attr:`where`) is the offending entry, relative to the
    directory (``meta/user%2Fa.md.json``, ``audit/log.jsonl line 3``), or the
    directory itself.
    """

    def __init__(self, where: str, message: str) -> None:
        try:  # a file name that is not UTF-8 is shown with escapes
            where = where.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            where = where.encode("utf-8", "backslashreplace").decode("utf-8")
        self.where = where
        super().__init__(where, message)


# --------------------------------------------------------------------------- shared rules


def _iso(at: datetime) -> str:
    """``at`` in ISO 8601, UTC, with its microseconds."""
    return at.astimezone(UTC).isoformat()


def _version_stamp(at: datetime) -> str:
    """The time part of a version's file name (``:`` cannot be in every file name)."""
    return _iso(at).replace(":", "-")


def _encoded(path: str) -> str:
    """The single file name standing for ``path`` under ``meta/`` and ``versions/``."""
    return quote(path, safe="")


def _json_bytes(value: Any, *, indent: int | None = 2) -> bytes:
    return json.dumps(value, indent=indent, sort_keys=True).encode("utf-8")


def _message_format(message: TranscriptMessage) -> tuple[str, Any]:
    """``(format, JSON)`` of a transcript message (``format``: ``json`` or ``pydantic-ai``)."""
    encoded = encode_raw_messages([message.message])
    if encoded is None:  # pragma: no cover - one message never encodes to nothing
        raise DirectoryLayoutError(TRANSCRIPT_PATH, "a message encodes to nothing")
    return str(encoded["format"]), encoded["messages"][0]


# --------------------------------------------------------------------------- export


@dataclass(frozen=True)
class _Out:
    """One file of an exported directory: its bytes and, for files and versions, its time."""

    data: bytes
    mtime: datetime | None = None


def _layout_tree(snapshot: WorkspaceSnapshot) -> dict[str, _Out]:
    """Every file of ``snapshot``'s directory, by relative POSIX path (pure; nothing written).

    Raises:
        DirectoryLayoutError: The workspace cannot be laid out as a directory:
            a path is both a file and a folder (``notes`` and ``notes/a.md``),
            or a metadata or version name would be longer than 255 bytes.
    """
    tree: dict[str, _Out] = {}
    files: dict[str, Any] = {}
    for file in snapshot.files:
        info = file.info
        path = check_path(info.path)
        tree[path] = _Out(file.data, info.updated_at)
        meta = {
            "path": path,
            "sha256": info.sha256,
            "updated_at": _iso(info.updated_at),
            "updated_by": info.actor,
            "reason": info.reason,
            "bytes": info.size,
        }
        meta_bytes = json.dumps({k: meta[k] for k in _META_KEYS}, indent=2).encode("utf-8")
        tree[f"{_META_DIR}/{_encoded(path)}.json"] = _Out(meta_bytes)
        files[path] = {"kind": info.kind, "sha256": info.sha256, "version": info.version}

    versions: list[dict[str, Any]] = []
    version_of_write: dict[tuple[str, datetime, str], str] = {}
    for kept in snapshot.versions:
        info = kept.info
        path = check_path(info.path)
        base = f"{_VERSIONS_DIR}/{_encoded(path)}/{_version_stamp(info.updated_at)}_{info.sha256}"
        rel, salt = f"{base}.txt", 0
        while rel in tree:  # two versions of one content at the same instant
            salt += 1
            rel = f"{base}_{salt:08x}.txt"
        tree[rel] = _Out(kept.data, info.updated_at)
        version_of_write.setdefault((path, info.updated_at, info.sha256), rel)
        versions.append(
            {
                "file": rel,
                "kind": info.kind,
                "version": info.version,
                "actor": info.actor,
                "reason": info.reason,
            }
        )

    if snapshot.audit:
        lines = []
        for record in snapshot.audit:
            line = record.to_dict()
            line["ts"] = _iso(record.at)
            line["version_file"] = version_of_write.get(
                (record.path, record.at, record.new_sha), ""
            )
            lines.append(_json_bytes(line, indent=None) + b"\n")
        tree[AUDIT_LOG_PATH] = _Out(b"".join(lines))

    formats: list[dict[str, Any]] = []
    messages: list[Any] = []
    for message in snapshot.messages:
        fmt, value = _message_format(message)
        messages.append(value)
        formats.append({"at": _iso(message.at), "format": fmt})
    tree[TRANSCRIPT_PATH] = _Out(_json_bytes(messages))
    sidecar = {
        "format": _SIDECAR_FORMAT,
        "format_version": _SIDECAR_VERSION,
        "key": snapshot.key,
        "created_at": _iso(snapshot.created_at),
        "files": files,
        "versions": versions,
        "messages": formats,
    }
    tree[SIDECAR_PATH] = _Out(_json_bytes(sidecar))
    _check_tree(tree)
    return tree


def _check_tree(tree: Mapping[str, _Out]) -> None:
    """Every path can be created: no file is also a folder, no name is too long."""
    folders: dict[str, str] = {}
    for rel in sorted(tree):
        segments = rel.split("/")
        for segment in segments:
            if len(segment.encode("utf-8")) > _MAX_NAME_BYTES:
                raise DirectoryLayoutError(
                    rel,
                    f"Flyte's layout needs a file name of more than {_MAX_NAME_BYTES} bytes "
                    "here (a deep or long path); shorten the path",
                )
        for depth in range(1, len(segments)):
            folders.setdefault("/".join(segments[:depth]), rel)
    for folder, inside in folders.items():
        if folder in tree:
            raise DirectoryLayoutError(
                folder,
                f"is a file and also the folder of {inside!r}: a directory cannot hold both",
            )


def _looks_like_workspace(target: Path) -> bool:
    return (target / TRANSCRIPT_PATH).is_file() or (target / SIDECAR_PATH).is_file()


def _check_target(target: Path, overwrite: bool) -> bool:
    """Whether ``target`` exists (and may be replaced); refuse what must not be touched."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return False
    where = str(target)
    if stat.S_ISLNK(st.st_mode):
        raise DirectoryLayoutError(where, "is a symbolic link; export to a real directory")
    if not stat.S_ISDIR(st.st_mode):
        raise DirectoryLayoutError(where, "exists and is not a directory")
    if not os.listdir(target):
        return True
    if not overwrite:
        raise DirectoryLayoutError(
            where, "is not empty; pass overwrite=True (--force) to replace an exported workspace"
        )
    if not _looks_like_workspace(target):
        raise DirectoryLayoutError(
            where,
            f"is not empty and holds no workspace (no {TRANSCRIPT_PATH} or {SIDECAR_PATH}); "
            "it is not replaced, even with overwrite",
        )
    return True


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable where the platform allows it."""
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


def _write_file(root: Path, rel: str, out: _Out) -> None:
    target = root.joinpath(*rel.split("/"))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(target, "xb") as handle:
            handle.write(out.data)
            handle.flush()
            os.fsync(handle.fileno())
    except FileExistsError:
        raise DirectoryLayoutError(
            rel, "collides with another file (a file system that ignores letter case?)"
        ) from None
    if out.mtime is not None:
        ns = (out.mtime - _EPOCH) // timedelta(microseconds=1) * 1_000
        os.utime(target, ns=(ns, ns))


def _write_tree(tree: Mapping[str, _Out], target: Path, overwrite: bool) -> None:
    """Write ``tree`` as the directory ``target``: in a temporary directory, then renamed."""
    target = Path(os.path.abspath(target))
    exists = _check_target(target, overwrite)
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".firefly-export-", dir=parent))
    try:
        for rel in sorted(tree):
            _write_file(staging, rel, tree[rel])
        if exists:
            _check_target(target, overwrite)  # again, just before replacing it
            aside = parent / f".firefly-replaced-{secrets.token_hex(8)}"
            os.rename(target, aside)
            try:
                os.rename(staging, target)
            except BaseException:
                os.rename(aside, target)
                raise
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.rename(staging, target)
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_directory(
    snapshot: WorkspaceSnapshot, path: str | os.PathLike[str], *, overwrite: bool = False
) -> None:
    """Write ``snapshot`` as directory ``path`` in Flyte's layout (see the module docstring).

    Everything is laid out and checked first, then written under a temporary
    name next to ``path`` and renamed into place.

    Raises:
        DirectoryLayoutError: ``path`` is a file, a symbolic link, a non-empty
            directory (without ``overwrite``) or a non-empty directory that
            holds no workspace; or the workspace cannot be laid out as a
            directory.  Nothing is written.
    """
    _write_tree(_layout_tree(snapshot), Path(path), overwrite)


def _export(
    workspace: ArtifactWorkspace, path: Path, overwrite: bool
) -> Operation[WorkspaceSnapshot]:
    yield from CallOut(_check_target, (Path(os.path.abspath(path)), overwrite), what="a file check")
    snapshot = yield from workspace._export_snapshot()
    tree = _layout_tree(snapshot)
    yield from CallOut(_write_tree, (tree, path, overwrite), what="the directory writer")
    logger.info(
        "artifact workspace %r exported to %s: %d file(s), %d audit record(s), "
        "%d version(s), %d message(s)",
        snapshot.key,
        path,
        len(snapshot.files),
        len(snapshot.audit),
        len(snapshot.versions),
        len(snapshot.messages),
    )
    return snapshot


def export_directory(
    workspace: ArtifactWorkspace, path: str | os.PathLike[str], *, overwrite: bool = False
) -> WorkspaceSnapshot:
    """Export ``workspace`` to directory ``path`` in Flyte's layout; return what was written.

    One read unit of work (:meth:`ArtifactWorkspace.export_snapshot
    <firefly_orm.artifacts.ArtifactWorkspace.export_snapshot>`), then
    :func:`write_directory`.

    Raises:
        NotFoundError: The workspace does not exist.
        DirectoryLayoutError: As :func:`write_directory` (checked before the read too).
    """
    return run(workspace.store, _export(workspace, Path(path), overwrite))


async def async_export_directory(
    workspace: ArtifactWorkspace, path: str | os.PathLike[str], *, overwrite: bool = False
) -> WorkspaceSnapshot:
    """Async twin of :func:`export_directory` (file I/O in a worker thread)."""
    return await arun(workspace.store, _export(workspace, Path(path), overwrite))


# --------------------------------------------------------------------------- reading a directory


@dataclass(frozen=True)
class _Found:
    """A regular file read from the directory: its bytes and modification time."""

    data: bytes
    mtime: datetime


def _limit(rel: str) -> int:
    top = rel.partition("/")[0]
    if rel == TRANSCRIPT_PATH or top in (_AUDIT_DIR, _META_DIR):
        return MAX_BOOKKEEPING_BYTES
    return MAX_FILE_BYTES


def _read_regular(full: Path, rel: str, seen: os.stat_result) -> _Found:
    """The bytes of regular file ``full``, refusing anything else (or a file swapped meanwhile)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_BINARY", 0)
    limit = _limit(rel)
    try:
        fd = os.open(full, flags)
    except OSError as exc:
        if os.path.islink(full):
            raise DirectoryLayoutError(rel, "is a symbolic link") from None
        raise DirectoryLayoutError(rel, f"cannot be read ({exc.strerror or exc})") from exc
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            raise DirectoryLayoutError(rel, "changed while it was read; nothing imported")
        chunks: list[bytes] = []
        size = 0
        while chunk := handle.read(_CHUNK):
            size += len(chunk)
            if size > limit:
                raise DirectoryLayoutError(rel, f"is larger than {limit} bytes")
            chunks.append(chunk)
    mtime = _EPOCH + timedelta(microseconds=st.st_mtime_ns // 1_000)
    return _Found(b"".join(chunks), mtime)


def _scan(root: Path) -> dict[str, _Found]:
    """Every regular file under ``root`` by relative POSIX path; refuse links and special files."""
    found: dict[str, _Found] = {}
    pending: list[tuple[str, Path]] = [("", root)]
    while pending:
        prefix, directory = pending.pop()
        with os.scandir(directory) as entries:
            listed = sorted(entries, key=lambda e: e.name)
        for entry in listed:
            rel = prefix + entry.name
            if entry.is_symlink():
                raise DirectoryLayoutError(
                    rel, "is a symbolic link; an import reads regular files and directories only"
                )
            if entry.is_dir(follow_symlinks=False):
                pending.append((rel + "/", Path(entry.path)))
            elif entry.is_file(follow_symlinks=False):
                found[rel] = _read_regular(Path(entry.path), rel, entry.stat(follow_symlinks=False))
            else:
                raise DirectoryLayoutError(rel, "is not a regular file or a directory")
    return found


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"the key {key!r} appears twice")
        result[key] = value
    return result


def _parse_json(data: bytes, where: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except UnicodeDecodeError:
        raise DirectoryLayoutError(where, "is not UTF-8") from None
    except ValueError as exc:
        raise DirectoryLayoutError(where, f"is not valid JSON ({exc})") from None


def _time(value: Any, where: str, name: str) -> datetime:
    if not isinstance(value, str):
        raise DirectoryLayoutError(where, f"{name} must be an ISO 8601 time, got {value!r}")
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise DirectoryLayoutError(where, f"{name} {value!r} is not an ISO 8601 time") from None
    if at.tzinfo is None:
        raise DirectoryLayoutError(where, f"{name} {value!r} has no UTC offset")
    return at.astimezone(UTC)


def _sha(value: Any, where: str, name: str, *, empty: bool = False) -> str:
    if isinstance(value, str) and ((empty and value == "") or _SHA.fullmatch(value)):
        return value
    wanted = "a sha256 (64 lower-case hex digits)" + (" or ''" if empty else "")
    raise DirectoryLayoutError(where, f"{name} must be {wanted}, got {value!r}")


def _text(value: Any, where: str, name: str) -> str:
    if not isinstance(value, str):
        raise DirectoryLayoutError(where, f"{name} must be a string, got {value!r}")
    return value


def _checked(where: str, check: Any, value: Any) -> Any:
    """``check(value)``, its :class:`EntryValidationError` restated as about ``where``."""
    try:
        return check(value)
    except EntryValidationError as exc:
        raise DirectoryLayoutError(where, str(exc)) from None


def _exact_keys(obj: Any, keys: frozenset[str] | tuple[str, ...], where: str) -> Mapping[str, Any]:
    if not isinstance(obj, dict):
        raise DirectoryLayoutError(where, "must be a JSON object")
    missing = sorted(set(keys) - set(obj))
    unknown = sorted(set(obj) - set(keys))
    if missing:
        raise DirectoryLayoutError(where, f"lacks {', '.join(map(repr, missing))}")
    if unknown:
        raise DirectoryLayoutError(where, f"has unknown key(s) {', '.join(map(repr, unknown))}")
    return obj


@dataclass(frozen=True)
class _SidecarFile:
    kind: str
    sha256: str
    version: int


@dataclass(frozen=True)
class _SidecarVersion:
    kind: str
    version: int
    actor: str
    reason: str


@dataclass
class _Sidecar:
    """``meta/@workspace.json``, checked.

    It describes the directory as exported; Flyte may have written since
    (files, versions, messages), so what it lists is used where it still holds.
    """

    key: str
    created_at: datetime
    files: dict[str, _SidecarFile]
    versions: dict[str, _SidecarVersion]  # by version file, in the exported order
    messages: list[tuple[datetime, str]]  # time and format of the first messages


def _kind(value: Any, where: str) -> str:
    if value not in KINDS:
        raise DirectoryLayoutError(where, f"kind must be one of {', '.join(KINDS)}, got {value!r}")
    return str(value)


def _count(value: Any, where: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DirectoryLayoutError(where, f"{name} must be a whole number from 1, got {value!r}")
    return value


def _sequence(doc: Mapping[str, Any], name: str, kind: type, where: str) -> Any:
    value = doc[name]
    if not isinstance(value, kind):
        raise DirectoryLayoutError(
            where, f"{name} must be a JSON {kind.__name__.replace('dict', 'object')}"
        )
    return value


def _read_sidecar(found: _Found) -> _Sidecar:
    where = SIDECAR_PATH
    raw = _parse_json(found.data, where)
    version = raw.get("format_version") if isinstance(raw, dict) else None
    if version is not None and version != _SIDECAR_VERSION:
        raise DirectoryLayoutError(
            where, f"format_version {version!r} is not {_SIDECAR_VERSION} (a newer firefly_orm?)"
        )
    doc = _exact_keys(
        raw,
        ("format", "format_version", "key", "created_at", "files", "versions", "messages"),
        where,
    )
    if doc["format"] != _SIDECAR_FORMAT:
        raise DirectoryLayoutError(where, f"format must be {_SIDECAR_FORMAT!r}")
    files: dict[str, _SidecarFile] = {}
    for path, entry in _sequence(doc, "files", dict, where).items():
        at = f"{where} files[{path!r}]"
        fields = _exact_keys(entry, ("kind", "sha256", "version"), at)
        files[_checked(at, check_path, path)] = _SidecarFile(
            _kind(fields["kind"], at),
            _sha(fields["sha256"], at, "sha256"),
            _count(fields["version"], at, "version"),
        )
    versions: dict[str, _SidecarVersion] = {}
    for i, entry in enumerate(_sequence(doc, "versions", list, where)):
        at = f"{where} versions[{i}]"
        fields = _exact_keys(entry, ("file", "kind", "version", "actor", "reason"), at)
        rel = _text(fields["file"], at, "file")
        if rel in versions:
            raise DirectoryLayoutError(at, f"lists {rel!r} twice")
        _version_name(rel, at)
        versions[rel] = _SidecarVersion(
            _kind(fields["kind"], at),
            _count(fields["version"], at, "version"),
            _checked(at, check_actor, fields["actor"]),
            _checked(at, check_reason, fields["reason"]),
        )
    messages: list[tuple[datetime, str]] = []
    for i, entry in enumerate(_sequence(doc, "messages", list, where)):
        at = f"{where} messages[{i}]"
        fields = _exact_keys(entry, ("at", "format"), at)
        messages.append((_time(fields["at"], at, "at"), _text(fields["format"], at, "format")))
    return _Sidecar(
        key=_checked(where, check_workspace_key, doc["key"]),
        created_at=_time(doc["created_at"], where, "created_at"),
        files=files,
        versions=versions,
        messages=messages,
    )


@dataclass
class _Sorted:
    """A directory's files sorted into the parts of the layout."""

    files: dict[str, tuple[str, _Found]]  # workspace path -> (name in the directory, file)
    meta: dict[str, _Found]  # name under meta/
    versions: dict[str, _Found]  # relative path under versions/
    audit: _Found | None
    messages: _Found | None
    sidecar: _Found | None


def _sort(tree: Mapping[str, _Found]) -> _Sorted:
    parts = _Sorted({}, {}, {}, None, None, None)
    for rel, found in sorted(tree.items()):
        top, _, rest = rel.partition("/")
        if rel == TRANSCRIPT_PATH:
            parts.messages = found
        elif top.casefold() == TRANSCRIPT_PATH and rest:
            raise DirectoryLayoutError(rel, f"{TRANSCRIPT_PATH} is the transcript, not a folder")
        elif rel == SIDECAR_PATH:
            parts.sidecar = found
        elif top == _META_DIR and rest:
            if "/" in rest:
                raise DirectoryLayoutError(rel, f"{_META_DIR}/ holds no folders in Flyte's layout")
            parts.meta[rest] = found
        elif top == _AUDIT_DIR and rest:
            if rel != AUDIT_LOG_PATH:
                raise DirectoryLayoutError(
                    rel, f"only {AUDIT_LOG_PATH} belongs under {_AUDIT_DIR}/ in Flyte's layout"
                )
            parts.audit = found
        elif top == _VERSIONS_DIR and rest:
            if rest.count("/") != 1:
                raise DirectoryLayoutError(
                    rel, f"{_VERSIONS_DIR}/ holds <encoded path>/<time>_<sha>.txt files only"
                )
            parts.versions[rel] = found
        else:
            path = _checked(rel, check_path, rel)
            if path in parts.files:
                raise DirectoryLayoutError(
                    rel, f"and {parts.files[path][0]!r} are the same path once normalised"
                )
            parts.files[path] = (rel, found)
    return parts


def _file_meta(path: str, name: str, found: _Found, meta: _Found) -> tuple[datetime, str, str]:
    """``(updated_at, actor, reason)`` from a file's metadata, checked against its bytes."""
    where = f"{_META_DIR}/{name}"
    fields = _exact_keys(_parse_json(meta.data, where), _META_KEYS, where)
    if _checked(where, check_path, _text(fields["path"], where, "path")) != path:
        raise DirectoryLayoutError(where, f"describes {fields['path']!r}, not {path!r}")
    sha = _sha(fields["sha256"], where, "sha256")
    size = fields["bytes"]
    if isinstance(size, bool) or not isinstance(size, int):
        raise DirectoryLayoutError(where, f"bytes must be a whole number, got {size!r}")
    actual_size = len(found.data)
    actual_sha = Body.of_bytes(found.data).sha256
    if sha != actual_sha:
        raise DirectoryLayoutError(
            where, f"sha256 {sha} does not match {path!r}, whose bytes hash to {actual_sha}"
        )
    if size != actual_size:
        raise DirectoryLayoutError(where, f"bytes {size} but {path!r} has {actual_size} bytes")
    return (
        _time(fields["updated_at"], where, "updated_at"),
        _checked(where, check_actor, fields["updated_by"]),
        _checked(where, check_reason, fields["reason"]),
    )


def _audit_records(found: _Found | None) -> list[tuple[AuditRecord, str]]:
    """The audit log's records with each line's ``version_file``."""
    if found is None:
        return []
    try:
        text = found.data.decode("utf-8")
    except UnicodeDecodeError:
        raise DirectoryLayoutError(AUDIT_LOG_PATH, "is not UTF-8") from None
    records: list[tuple[AuditRecord, str]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{AUDIT_LOG_PATH} line {number}"
        raw = _parse_json(line.encode("utf-8"), where)
        if not isinstance(raw, dict):
            raise DirectoryLayoutError(where, "must be a JSON object")
        unknown = sorted(set(raw) - _AUDIT_KEYS)
        missing = sorted({"ts", "op", "path"} - set(raw))
        if unknown or missing:
            what = f"unknown key(s) {unknown}" if unknown else f"no {missing}"
            raise DirectoryLayoutError(where, f"has {what}")
        if raw["op"] not in _AUDIT_OPS:
            raise DirectoryLayoutError(
                where, f"op must be one of {', '.join(sorted(_AUDIT_OPS))}, got {raw['op']!r}"
            )
        source = raw.get("source")
        moved = raw.get("moved", False)
        if not isinstance(moved, bool) or (moved and source is None):
            raise DirectoryLayoutError(where, "moved must be true or false, and only with a source")
        record = AuditRecord(
            at=_time(raw["ts"], where, "ts"),
            op=raw["op"],
            path=_checked(where, check_path, raw["path"]),
            old_sha=_sha(raw.get("old_sha", ""), where, "old_sha", empty=True),
            new_sha=_sha(raw.get("new_sha", ""), where, "new_sha", empty=True),
            actor=_checked(where, check_actor, raw.get("actor", DEFAULT_ACTOR)),
            reason=_checked(where, check_reason, raw.get("reason", "")),
            source=None if source is None else _checked(where, check_path, source),
            moved=moved,
        )
        records.append((record, _text(raw.get("version_file", ""), where, "version_file")))
    return records


@dataclass(frozen=True)
class _Version:
    rel: str
    path: str
    at: datetime
    sha: str
    data: bytes


def _version_name(rel: str, where: str) -> tuple[str, datetime, str]:
    """``(path, time, sha256)`` a version file's place names: ``versions/<quote(path)>/<name>``."""
    parts = rel.split("/")
    if len(parts) != 3 or parts[0] != _VERSIONS_DIR:
        raise DirectoryLayoutError(
            where, f"{rel!r} is not {_VERSIONS_DIR}/<encoded path>/<time>_<sha256>.txt"
        )
    _, encoded, name = parts
    try:
        decoded = unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        decoded = ""
    if not decoded or _encoded(decoded) != encoded:
        raise DirectoryLayoutError(where, f"{encoded!r} is not a percent-encoded path")
    path = _checked(where, check_path, decoded)
    match = _VERSION_NAME.fullmatch(name)
    if match is None:
        raise DirectoryLayoutError(where, f"{name!r} is not named <time>_<sha256>.txt")
    tz = match["tz"].replace("-", ":") if match["tz"] != "Z" else "+00:00"
    stamp = f"{match['date']}T{match['h']}:{match['m']}:{match['s']}{match['frac'] or ''}{tz}"
    return path, _time(stamp, where, "the time in its name"), match["sha"]


def _versions(found: Mapping[str, _Found]) -> list[_Version]:
    """The kept versions, each name and sha checked (oldest first, then by name)."""
    versions: list[_Version] = []
    for rel, file in found.items():
        path, at, named = _version_name(rel, rel)
        actual = Body.of_bytes(file.data).sha256
        if actual != named:
            raise DirectoryLayoutError(
                rel, f"is named for sha256 {named} but its bytes hash to {actual}"
            )
        versions.append(_Version(rel, path, at, actual, file.data))
    versions.sort(key=lambda v: (v.at, v.rel))
    return versions


def _build(
    where: str,
    path: str,
    data: bytes,
    kind: str | None,
    *,
    actor: str,
    reason: str,
    at: datetime,
    version: int,
) -> ArtifactFile:
    try:
        return ArtifactFile.build(
            path, data, kind=kind, actor=actor, reason=reason, updated_at=at, version=version
        )
    except EntryValidationError as exc:
        message = str(exc).removeprefix(f"{exc.field}: ")
        raise DirectoryLayoutError(where, f"{message}") from None


def _writes_since_created(records: list[tuple[AuditRecord, str]]) -> dict[str, int]:
    """How many audited writes made each path what it is (since its last delete)."""
    counts: dict[str, int] = {}
    for record, _ in records:
        counts[record.path] = 0 if record.op == "delete" else counts.get(record.path, 0) + 1
    return counts


def _messages(found: _Found | None, sidecar: _Sidecar | None) -> list[TranscriptMessage]:
    """The transcript: the messages the extra file dates, then any appended since (by Flyte)."""
    dated = [] if sidecar is None else sidecar.messages
    if found is None:
        if dated:
            raise DirectoryLayoutError(
                TRANSCRIPT_PATH, f"is missing but {SIDECAR_PATH} dates {len(dated)} message(s)"
            )
        return []
    raw = _parse_json(found.data, TRANSCRIPT_PATH)
    if not isinstance(raw, list):
        raise DirectoryLayoutError(TRANSCRIPT_PATH, "must be a JSON list of messages")
    if len(raw) < len(dated):
        raise DirectoryLayoutError(
            TRANSCRIPT_PATH,
            f"holds {len(raw)} message(s) but {SIDECAR_PATH} dates {len(dated)}: "
            "messages were removed",
        )
    messages: list[TranscriptMessage] = []
    for i, (value, (at, fmt)) in enumerate(zip(raw, dated, strict=False)):
        try:
            decoded = decode_raw_messages(check_encoded({"format": fmt, "messages": [value]}))
        except ValueError as exc:  # EntryValidationError included: an unknown format
            reason = str(exc).splitlines()[0][:200]
            raise DirectoryLayoutError(
                f"{TRANSCRIPT_PATH} message {i}", f"is not a {fmt!r} message ({reason})"
            ) from None
        messages.append(TranscriptMessage(at, decoded[0]))
    # Undated messages (Flyte keeps no times) are dated now, after the dated ones.
    last = messages[-1].at if messages else None
    for message in transcript_from_json(raw[len(dated) :]):
        at = utcnow()
        if last is not None and at <= last:
            at = last + timedelta(microseconds=1)
        messages.append(TranscriptMessage(at, message))
        last = at
    return messages


def _snapshot_of_tree(tree: Mapping[str, _Found], default_key: str) -> WorkspaceSnapshot:
    """The workspace a directory's files hold (pure: ``tree`` maps relative paths to files)."""
    parts = _sort(tree)
    sidecar = None if parts.sidecar is None else _read_sidecar(parts.sidecar)
    records = _audit_records(parts.audit)
    writes = _writes_since_created(records)

    files: list[ArtifactFile] = []
    used_meta: set[str] = set()
    for path, (rel, found) in sorted(parts.files.items()):
        names = dict.fromkeys((f"{_encoded(path)}.json", f"{_encoded(rel)}.json"))
        meta_name = next((n for n in names if n in parts.meta), None)
        if meta_name is None:  # written without Flyte's metadata: its own time, "agent"
            at, actor, reason = found.mtime, DEFAULT_ACTOR, ""
        else:
            used_meta.add(meta_name)
            at, actor, reason = _file_meta(path, meta_name, found, parts.meta[meta_name])
        kind, version = None, max(writes.get(path, 0), 1)
        described = None if sidecar is None else sidecar.files.get(path)
        if described is not None and described.sha256 == Body.of_bytes(found.data).sha256:
            kind, version = described.kind, described.version
        files.append(
            _build(rel, path, found.data, kind, actor=actor, reason=reason, at=at, version=version)
        )
    for name in sorted(set(parts.meta) - used_meta):
        raise DirectoryLayoutError(f"{_META_DIR}/{name}", "describes no file of the directory")

    versions = _kept_versions(_versions(parts.versions), records, sidecar)
    messages = _messages(parts.messages, sidecar)
    return WorkspaceSnapshot(
        key=sidecar.key if sidecar is not None else default_key,
        created_at=sidecar.created_at if sidecar is not None else utcnow(),
        files=files,
        audit=[record for record, _ in records],
        versions=versions,
        messages=messages,
    )


def _kept_versions(
    found: list[_Version], records: list[tuple[AuditRecord, str]], sidecar: _Sidecar | None
) -> list[ArtifactFile]:
    """The versions: as the extra file describes them, else as Flyte's audit log does."""
    described = {} if sidecar is None else sidecar.versions
    order = {rel: i for i, rel in enumerate(described)}
    # Flyte's audit line names the version each write kept, and who wrote it.
    written_by = {vf: record for record, vf in records if vf}
    ranked = sorted(
        found,
        key=lambda v: (v.at, 0, order[v.rel], "") if v.rel in order else (v.at, 1, 0, v.rel),
    )
    numbers: dict[str, int] = {}
    versions: list[ArtifactFile] = []
    for kept in ranked:
        entry = described.get(kept.rel)
        record = written_by.get(kept.rel)
        if entry is not None:
            kind, version, actor, reason = entry.kind, entry.version, entry.actor, entry.reason
        else:
            kind, version = None, numbers.get(kept.path, 0) + 1
            actor = record.actor if record is not None else DEFAULT_ACTOR
            reason = record.reason if record is not None else ""
        numbers[kept.path] = version
        versions.append(
            _build(
                kept.rel,
                kept.path,
                kept.data,
                kind,
                actor=actor,
                reason=reason,
                at=kept.at,
                version=version,
            )
        )
    return versions


def read_directory(path: str | os.PathLike[str], *, key: str | None = None) -> WorkspaceSnapshot:
    """The workspace directory ``path`` holds, read and checked (see the module docstring).

    The key is ``key``, else the one the directory records, else the
    directory's name (Flyte keeps a keyed store under a path ending in its key).

    Raises:
        DirectoryLayoutError: ``path`` is not a directory, or holds anything
            the layout does not allow.
    """
    root = Path(os.path.abspath(path))
    if not root.is_dir():
        raise DirectoryLayoutError(str(root), "is not a directory")
    snapshot = _snapshot_of_tree(_scan(root), root.name)
    if key is not None:
        snapshot.key = check_workspace_key(key)
    else:
        snapshot.key = _checked(str(root), check_workspace_key, snapshot.key)
    return snapshot


def _import(
    artifacts: Artifacts,
    path: Path,
    key: str | None,
    replace: bool,
    options: WorkspaceOptions,
) -> Operation[ArtifactWorkspace]:
    snapshot = yield from CallOut(read_directory, (path,), what="the directory reader")
    handle = yield from artifacts._import_snapshot(snapshot, key=key, replace=replace, **options)
    logger.info("artifact workspace %r imported from %s", handle.key, path)
    return handle


def import_directory(
    artifacts: Artifacts,
    path: str | os.PathLike[str],
    *,
    key: str | None = None,
    replace: bool = False,
    **options: Unpack[WorkspaceOptions],
) -> ArtifactWorkspace:
    """Import directory ``path`` (Flyte's layout) as a workspace of ``artifacts``; return a handle.

    The directory is read and checked whole (:func:`read_directory`), then
    written by :meth:`Artifacts.import_snapshot
    <firefly_orm.artifacts.Artifacts.import_snapshot>` in one unit of work.

    Args:
        artifacts: The registry (and owner) the workspace is imported into.
        path: The directory.
        key: The workspace key (default: the one the directory records, else
            the directory's name).
        replace: Replace a workspace that exists already.
        **options: Options of the returned handle (``max_bytes`` also bounds
            the files imported).

    Raises:
        DirectoryLayoutError: The directory is refused; nothing is written.
        WorkspaceExistsError: The workspace exists and ``replace`` is false.
    """
    return run(artifacts.store, _import(artifacts, Path(path), key, replace, options))


async def async_import_directory(
    artifacts: Artifacts,
    path: str | os.PathLike[str],
    *,
    key: str | None = None,
    replace: bool = False,
    **options: Unpack[WorkspaceOptions],
) -> ArtifactWorkspace:
    """Async twin of :func:`import_directory` (file I/O in a worker thread)."""
    return await arun(artifacts.store, _import(artifacts, Path(path), key, replace, options))
