"""Artifact workspaces: path-addressed files with hashes, compare-and-set, audit and versions.

An agent keeps its working state as named documents (``user/notes.md``,
``memory/profile.json``) beside its transcript; a trusted reviewer promotes
what it proposes into read-only areas.  :class:`Artifacts` holds keyed
workspaces (``create``, ``get_or_create``, ``open``, ``exists``,
``delete_workspace``), per user if asked; an :class:`ArtifactWorkspace`
writes and reads text, JSON and small binary files, lists paths by prefix,
stats them (sha256, size, time, version, actor, reason), writes and deletes
under compare-and-set (``expected_sha=``), keeps an audit log and, with
``keep_versions``, every written content; and keeps a transcript, one row per
message.  Every operation is one unit of work on any store, sync or async.

* :mod:`~firefly_orm.artifacts.model`: path rules, row layout, result models, errors;
* :mod:`~firefly_orm.artifacts.ops`: the transactions (plain functions over a unit of work);
* :mod:`~firefly_orm.artifacts.workspace`: :class:`Artifacts` and :class:`ArtifactWorkspace`.
"""

from firefly_orm.artifacts.model import (
    BYTES,
    DEFAULT_MAX_BYTES,
    JSON,
    KINDS,
    MAX_FILE_BYTES,
    MAX_PATH_BYTES,
    RESERVED_DIRS,
    TEXT,
    TRANSCRIPT_PATH,
    ArtifactFile,
    AuditRecord,
    FileInfo,
    Layout,
    ReadOnlyPathError,
    ShaMismatchError,
    TranscriptMessage,
    WorkspaceExistsError,
    WorkspaceInfo,
    WorkspaceOptions,
    WorkspaceSnapshot,
    check_path,
    json_text,
    transcript_from_json,
)
from firefly_orm.artifacts.workspace import Artifacts, ArtifactWorkspace

__all__ = [
    "BYTES",
    "DEFAULT_MAX_BYTES",
    "JSON",
    "KINDS",
    "MAX_FILE_BYTES",
    "MAX_PATH_BYTES",
    "RESERVED_DIRS",
    "TEXT",
    "TRANSCRIPT_PATH",
    "ArtifactFile",
    "ArtifactWorkspace",
    "Artifacts",
    "AuditRecord",
    "FileInfo",
    "Layout",
    "ReadOnlyPathError",
    "ShaMismatchError",
    "TranscriptMessage",
    "WorkspaceExistsError",
    "WorkspaceInfo",
    "WorkspaceOptions",
    "WorkspaceSnapshot",
    "check_path",
    "json_text",
    "transcript_from_json",
]
