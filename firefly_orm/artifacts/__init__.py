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

* :mod:`~firefly_orm.artifacts._rules`: the input rules (paths, keys, actors, shas, options);
* :mod:`~firefly_orm.artifacts._errors`: the errors;
* :mod:`~firefly_orm.artifacts._results`: file bodies and the result models;
* :mod:`~firefly_orm.artifacts._layout`: the row layout, and rows read back as results;
* :mod:`~firefly_orm.artifacts._ops`: the transactions (plain functions over a unit of work);
* :mod:`~firefly_orm.artifacts._handle`: :class:`ArtifactWorkspace`, a handle on one workspace;
* :mod:`~firefly_orm.artifacts._registry`: :class:`Artifacts`, the keyed workspaces;
* :mod:`~firefly_orm.artifacts._flyte`: export to, and import from, Flyte's directory layout,
  and :class:`DirectoryWorkspace`, a workspace kept live in that layout.

:mod:`~firefly_orm.artifacts._model` and :mod:`~firefly_orm.artifacts._workspace`
keep their names for existing imports; they define nothing.
"""

from firefly_orm.artifacts._errors import (
    ReadOnlyPathError,
    ShaMismatchError,
    WorkspaceExistsError,
)
from firefly_orm.artifacts._flyte import DirectoryWorkspace
from firefly_orm.artifacts._handle import ArtifactWorkspace
from firefly_orm.artifacts._layout import Layout
from firefly_orm.artifacts._registry import Artifacts
from firefly_orm.artifacts._results import (
    BYTES,
    JSON,
    KINDS,
    TEXT,
    ArtifactFile,
    AuditRecord,
    FileInfo,
    TranscriptMessage,
    WorkspaceInfo,
    WorkspaceSnapshot,
    json_text,
    transcript_from_json,
)
from firefly_orm.artifacts._rules import (
    DEFAULT_MAX_BYTES,
    MAX_FILE_BYTES,
    MAX_PATH_BYTES,
    RESERVED_DIRS,
    TRANSCRIPT_PATH,
    WorkspaceOptions,
    check_path,
)

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
    "DirectoryWorkspace",
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
