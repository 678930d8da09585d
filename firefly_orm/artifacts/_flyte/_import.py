"""Importing a directory in Flyte's layout as a workspace: read and checked whole, then written.

See :mod:`firefly_orm.artifacts._flyte` for what is read, what the extra file
adds, and what is refused.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Unpack

from firefly_orm.artifacts._flyte._layout import (
    AUDIT_DIR,
    AUDIT_LOG_PATH,
    LIVE_DIR,
    LIVE_JOURNAL_PATH,
    META_DIR,
    META_KEYS,
    SIDECAR_PATH,
    VERSIONS_DIR,
    DirectoryLayoutError,
    checked,
    encoded_name,
    exact_keys,
    mtime_of,
    parse_json,
    read_sha,
    read_text,
    read_time,
    version_name,
)
from firefly_orm.artifacts._flyte._sidecar import Sidecar, read_sidecar
from firefly_orm.artifacts._handle import ArtifactWorkspace
from firefly_orm.artifacts._registry import Artifacts
from firefly_orm.artifacts._results import (
    ArtifactFile,
    AuditRecord,
    Body,
    TranscriptMessage,
    WorkspaceSnapshot,
    transcript_from_json,
)
from firefly_orm.artifacts._rules import (
    DEFAULT_ACTOR,
    MAX_FILE_BYTES,
    TRANSCRIPT_PATH,
    WorkspaceOptions,
    check_actor,
    check_path,
    check_reason,
    check_workspace_key,
)
from firefly_orm.bridges._steps import CallOut, Operation, arun, run
from firefly_orm.conversation._codec import check_encoded, decode_raw_messages
from firefly_orm.entry import utcnow
from firefly_orm.errors import EntryValidationError
from firefly_orm.file_store._regular import read_regular_file

__all__ = [
    "MAX_BOOKKEEPING_BYTES",
    "async_import_directory",
    "import_directory",
    "read_directory",
]

#: The logger the Flyte layout has always used (logging configurations name it).
logger = logging.getLogger("firefly_orm.artifacts._flyte")

#: The keys an audit line may have (``ts``, ``op`` and ``path`` are required).
_AUDIT_KEYS = frozenset(
    {"ts", "op", "path", "old_sha", "new_sha", "actor", "reason", "version_file", "source", "moved"}
)
_AUDIT_OPS = frozenset({"create", "update", "delete", "promote"})
#: Largest bookkeeping file an import reads (the transcript, the audit log, metadata).
MAX_BOOKKEEPING_BYTES = 256 * 1024 * 1024


# --------------------------------------------------------------------------- reading a directory


@dataclass(frozen=True)
class _Found:
    """A regular file read from the directory: its bytes and modification time."""

    data: bytes
    mtime: datetime


def _limit(rel: str) -> int:
    top = rel.partition("/")[0]
    if rel == TRANSCRIPT_PATH or top in (AUDIT_DIR, META_DIR):
        return MAX_BOOKKEEPING_BYTES
    return MAX_FILE_BYTES


def _read_regular(full: Path, rel: str, seen: os.stat_result) -> _Found:
    """The bytes of regular file ``full``, refusing anything else (or a file swapped meanwhile)."""
    try:
        data, st = read_regular_file(
            full, seen, _limit(rel), lambda reason: DirectoryLayoutError(rel, reason)
        )
    except OSError as exc:
        if os.path.islink(full):
            raise DirectoryLayoutError(rel, "is a symbolic link") from None
        raise DirectoryLayoutError(rel, f"cannot be read ({exc.strerror or exc})") from exc
    return _Found(data, mtime_of(st.st_mtime_ns))


def _scan(root: Path) -> dict[str, _Found]:
    """Every regular file under ``root`` by relative POSIX path; refuse links and special files."""
    found: dict[str, _Found] = {}
    pending: list[tuple[str, Path]] = [("", root)]
    while pending:
        prefix, directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError as exc:
            where = prefix.rstrip("/") or str(root)
            raise DirectoryLayoutError(where, f"cannot be listed ({exc.strerror or exc})") from None
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
        if rel == LIVE_JOURNAL_PATH:
            raise DirectoryLayoutError(
                rel,
                "a live workspace's write was cut off; open the directory with "
                "DirectoryWorkspace to finish it first",
            )
        if rel.startswith(f"{LIVE_DIR}/"):
            continue  # the live workspace's lock and temporary files
        if rel == TRANSCRIPT_PATH:
            parts.messages = found
        elif top.casefold() == TRANSCRIPT_PATH and rest:
            raise DirectoryLayoutError(rel, f"{TRANSCRIPT_PATH} is the transcript, not a folder")
        elif rel == SIDECAR_PATH:
            parts.sidecar = found
        elif top == META_DIR and rest:
            if "/" in rest:
                raise DirectoryLayoutError(rel, f"{META_DIR}/ holds no folders in Flyte's layout")
            parts.meta[rest] = found
        elif top == AUDIT_DIR and rest:
            if rel != AUDIT_LOG_PATH:
                raise DirectoryLayoutError(
                    rel, f"only {AUDIT_LOG_PATH} belongs under {AUDIT_DIR}/ in Flyte's layout"
                )
            parts.audit = found
        elif top == VERSIONS_DIR and rest:
            if rest.count("/") != 1:
                raise DirectoryLayoutError(
                    rel, f"{VERSIONS_DIR}/ holds <encoded path>/<time>_<sha>.txt files only"
                )
            parts.versions[rel] = found
        else:
            path = checked(rel, check_path, rel)
            if path in parts.files:
                raise DirectoryLayoutError(
                    rel, f"and {parts.files[path][0]!r} are the same path once normalised"
                )
            parts.files[path] = (rel, found)
    return parts


def _file_meta(path: str, name: str, found: _Found, meta: _Found) -> tuple[datetime, str, str]:
    """``(updated_at, actor, reason)`` from a file's metadata, checked against its bytes."""
    where = f"{META_DIR}/{name}"
    fields = exact_keys(parse_json(meta.data, where), META_KEYS, where)
    if checked(where, check_path, read_text(fields["path"], where, "path")) != path:
        raise DirectoryLayoutError(where, f"describes {fields['path']!r}, not {path!r}")
    sha = read_sha(fields["sha256"], where, "sha256")
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
        read_time(fields["updated_at"], where, "updated_at"),
        checked(where, check_actor, fields["updated_by"]),
        checked(where, check_reason, fields["reason"]),
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
        raw = parse_json(line.encode("utf-8"), where)
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
            at=read_time(raw["ts"], where, "ts"),
            op=raw["op"],
            path=checked(where, check_path, raw["path"]),
            old_sha=read_sha(raw.get("old_sha", ""), where, "old_sha", empty=True),
            new_sha=read_sha(raw.get("new_sha", ""), where, "new_sha", empty=True),
            actor=checked(where, check_actor, raw.get("actor", DEFAULT_ACTOR)),
            reason=checked(where, check_reason, raw.get("reason", "")),
            source=None if source is None else checked(where, check_path, source),
            moved=moved,
        )
        records.append((record, read_text(raw.get("version_file", ""), where, "version_file")))
    return records


@dataclass(frozen=True)
class _Version:
    rel: str
    path: str
    at: datetime
    sha: str
    data: bytes


def _versions(found: Mapping[str, _Found]) -> list[_Version]:
    """The kept versions, each name and sha checked (oldest first, then by name)."""
    versions: list[_Version] = []
    for rel, file in found.items():
        path, at, named = version_name(rel, rel)
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


def _messages(found: _Found | None, sidecar: Sidecar | None) -> list[TranscriptMessage]:
    """The transcript: the messages the extra file dates, then any appended since (by Flyte)."""
    dated = [] if sidecar is None else sidecar.messages
    if found is None:
        if dated:
            raise DirectoryLayoutError(
                TRANSCRIPT_PATH, f"is missing but {SIDECAR_PATH} dates {len(dated)} message(s)"
            )
        return []
    raw = parse_json(found.data, TRANSCRIPT_PATH)
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
    sidecar = None if parts.sidecar is None else read_sidecar(parts.sidecar.data)
    records = _audit_records(parts.audit)
    writes = _writes_since_created(records)

    files: list[ArtifactFile] = []
    used_meta: set[str] = set()
    for path, (rel, found) in sorted(parts.files.items()):
        names = dict.fromkeys((f"{encoded_name(path)}.json", f"{encoded_name(rel)}.json"))
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
        raise DirectoryLayoutError(f"{META_DIR}/{name}", "describes no file of the directory")

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
    found: list[_Version], records: list[tuple[AuditRecord, str]], sidecar: Sidecar | None
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
    """The workspace directory ``path`` holds, read and checked.

    What is read and what is refused: :mod:`firefly_orm.artifacts._flyte`.
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
        snapshot.key = checked(str(root), check_workspace_key, snapshot.key)
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
