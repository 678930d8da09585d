"""Exporting a workspace to a directory in Flyte's layout: laid out, checked, then written.

See :mod:`firefly_orm.artifacts._flyte` for the layout and the rules of a safe write.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from firefly_orm.artifacts._flyte._layout import (
    AUDIT_LOG_PATH,
    SIDECAR_PATH,
    DirectoryLayoutError,
    iso,
    json_bytes,
    meta_bytes,
    meta_path,
    mtime_ns,
    version_base,
)
from firefly_orm.artifacts._flyte._sidecar import sidecar_bytes
from firefly_orm.artifacts._handle import ArtifactWorkspace
from firefly_orm.artifacts._results import TranscriptMessage, WorkspaceSnapshot
from firefly_orm.artifacts._rules import TRANSCRIPT_PATH, check_path
from firefly_orm.bridges._steps import CallOut, Operation, arun, run
from firefly_orm.conversation._codec import encode_raw_messages
from firefly_orm.file_store._log import fsync_dir

__all__ = ["async_export_directory", "export_directory", "write_directory"]

#: Longest file name a directory entry may have (bytes), on the file systems that matter.
_MAX_NAME_BYTES = 255

#: The logger the Flyte layout has always used (logging configurations name it).
logger = logging.getLogger("firefly_orm.artifacts._flyte")


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
            "updated_at": iso(info.updated_at),
            "updated_by": info.actor,
            "reason": info.reason,
            "bytes": info.size,
        }
        tree[meta_path(path)] = _Out(meta_bytes(meta))
        files[path] = {"kind": info.kind, "sha256": info.sha256, "version": info.version}

    versions: list[dict[str, Any]] = []
    version_of_write: dict[tuple[str, datetime, str], str] = {}
    for kept in snapshot.versions:
        info = kept.info
        path = check_path(info.path)
        base = version_base(path, info.updated_at, info.sha256)
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
            line["ts"] = iso(record.at)
            line["version_file"] = version_of_write.get(
                (record.path, record.at, record.new_sha), ""
            )
            lines.append(json_bytes(line, indent=None) + b"\n")
        tree[AUDIT_LOG_PATH] = _Out(b"".join(lines))

    formats: list[dict[str, Any]] = []
    messages: list[Any] = []
    for message in snapshot.messages:
        fmt, value = _message_format(message)
        messages.append(value)
        formats.append({"at": iso(message.at), "format": fmt})
    tree[TRANSCRIPT_PATH] = _Out(json_bytes(messages))
    tree[SIDECAR_PATH] = _Out(sidecar_bytes(snapshot, files, versions, formats))
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
        ns = mtime_ns(out.mtime)
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
        fsync_dir(parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_directory(
    snapshot: WorkspaceSnapshot, path: str | os.PathLike[str], *, overwrite: bool = False
) -> None:
    """Write ``snapshot`` as directory ``path`` in Flyte's layout.

    The layout and its rules are those of :mod:`firefly_orm.artifacts._flyte`.
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
