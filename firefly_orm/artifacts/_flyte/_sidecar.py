"""The extra file of an exported directory, ``meta/@workspace.json``: written and read back.

It holds what Flyte's layout has no place for (see
:mod:`firefly_orm.artifacts._flyte`): the workspace key and creation time,
each file's kind and version count, the metadata of each kept version, and
each message's time and format.  Read back, it is checked whole: exact keys,
known kinds, counts from 1, paths and version names the layout accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from firefly_orm.artifacts._flyte._layout import (
    SIDECAR_PATH,
    DirectoryLayoutError,
    checked,
    exact_keys,
    iso,
    json_bytes,
    parse_json,
    read_sha,
    read_text,
    read_time,
    version_name,
)
from firefly_orm.artifacts._results import KINDS, WorkspaceSnapshot
from firefly_orm.artifacts._rules import check_actor, check_path, check_reason, check_workspace_key

__all__ = ["Sidecar", "read_sidecar", "sidecar_bytes"]

#: Tells the extra file apart from anything else; bumped when its meaning changes.
_SIDECAR_FORMAT = "firefly-orm artifact workspace"
_SIDECAR_VERSION = 1


def sidecar_bytes(
    snapshot: WorkspaceSnapshot,
    files: dict[str, Any],
    versions: list[dict[str, Any]],
    messages: list[dict[str, Any]],
) -> bytes:
    """The extra file of ``snapshot``'s directory: its key and time, and what the export laid out.

    ``files`` maps each path to its kind, sha256 and version; ``versions``
    describes each kept version's file, in order; ``messages`` dates each
    message and names its format.
    """
    return json_bytes(
        {
            "format": _SIDECAR_FORMAT,
            "format_version": _SIDECAR_VERSION,
            "key": snapshot.key,
            "created_at": iso(snapshot.created_at),
            "files": files,
            "versions": versions,
            "messages": messages,
        }
    )


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
class Sidecar:
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


def read_sidecar(data: bytes) -> Sidecar:
    """The extra file's bytes, parsed and checked.

    Raises:
        DirectoryLayoutError: It is not an extra file this version writes.
    """
    where = SIDECAR_PATH
    raw = parse_json(data, where)
    version = raw.get("format_version") if isinstance(raw, dict) else None
    if version is not None and version != _SIDECAR_VERSION:
        raise DirectoryLayoutError(
            where, f"format_version {version!r} is not {_SIDECAR_VERSION} (a newer firefly_orm?)"
        )
    doc = exact_keys(
        raw,
        ("format", "format_version", "key", "created_at", "files", "versions", "messages"),
        where,
    )
    if doc["format"] != _SIDECAR_FORMAT:
        raise DirectoryLayoutError(where, f"format must be {_SIDECAR_FORMAT!r}")
    files: dict[str, _SidecarFile] = {}
    for path, entry in _sequence(doc, "files", dict, where).items():
        at = f"{where} files[{path!r}]"
        fields = exact_keys(entry, ("kind", "sha256", "version"), at)
        files[checked(at, check_path, path)] = _SidecarFile(
            _kind(fields["kind"], at),
            read_sha(fields["sha256"], at, "sha256"),
            _count(fields["version"], at, "version"),
        )
    versions: dict[str, _SidecarVersion] = {}
    for i, entry in enumerate(_sequence(doc, "versions", list, where)):
        at = f"{where} versions[{i}]"
        fields = exact_keys(entry, ("file", "kind", "version", "actor", "reason"), at)
        rel = read_text(fields["file"], at, "file")
        if rel in versions:
            raise DirectoryLayoutError(at, f"lists {rel!r} twice")
        version_name(rel, at)
        versions[rel] = _SidecarVersion(
            _kind(fields["kind"], at),
            _count(fields["version"], at, "version"),
            checked(at, check_actor, fields["actor"]),
            checked(at, check_reason, fields["reason"]),
        )
    messages: list[tuple[datetime, str]] = []
    for i, entry in enumerate(_sequence(doc, "messages", list, where)):
        at = f"{where} messages[{i}]"
        fields = exact_keys(entry, ("at", "format"), at)
        messages.append(
            (read_time(fields["at"], at, "at"), read_text(fields["format"], at, "format"))
        )
    return Sidecar(
        key=checked(where, check_workspace_key, doc["key"]),
        created_at=read_time(doc["created_at"], where, "created_at"),
        files=files,
        versions=versions,
        messages=messages,
    )
