"""How an artifact workspace's rows are laid out, and read back as results.

**Rows.**  A workspace is a family of namespaces (:class:`Layout`), every row a
:class:`~firefly_orm.entry.MemoryEntry` carrying the workspace owner's
``user_id`` (``None`` for a shared workspace), so ``erase_user`` removes a
user's workspaces with the rest of their data:

========================  ===========================  =========================================
namespace                 one row per                  layout
========================  ===========================  =========================================
``artifacts``             workspace (its *head*)       key = workspace key; id derived from
                                                       (owner, key); content ``{"key": ...}``
``artifacts:<k>[@<u>]``   file                         key = path; id derived from the path;
                                                       content = the body (below); metadata =
                                                       ``sha256``, ``size``, ``kind``,
                                                       ``actor``, ``reason``; ``created_at`` =
                                                       time of the last write; ``version`` =
                                                       writes since the file was (re)created
``…:audit``               successful write or delete   key = path; content = the
                                                       :class:`AuditRecord` fields
``…:versions``            successful write, with       key = ``path + "\\x1f" + sha256``;
                          ``keep_versions=True``       content = the body; metadata as the
                                                       file row's, plus ``version``
``…:transcript``          transcript message           content = the message in the portable
                                                       form of ``conversation/_codec.py``
========================  ===========================  =========================================

**Only the owner's rows.**  A row of these namespaces is the workspace's only
when it carries the owner's ``user_id`` (:meth:`Layout.owns`), and a file or
head row only with the id derived from its key (:meth:`Layout.is_file_row`,
:func:`is_head_row`).  Another layer given one of these namespaces by
another user (a long-term memory's ``namespace=``) can add rows there; they
are never read as the workspace's, so they can neither show another user's
data nor shadow, break or replace the owner's.

``<k>`` and ``<u>`` are the workspace key and the owner, percent-encoded
(``urllib.parse.quote`` with no safe characters), or ``!`` and a digest when
that would be longer than :data:`MAX_NAME_SEGMENT` characters; so every
(owner, key) pair has namespaces of its own and their length stays bounded.

The bodies (the content of file and version rows) and the results are
those of :mod:`firefly_orm.artifacts._results`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from firefly_orm._layout import ARTIFACTS_NAMESPACE
from firefly_orm.artifacts._results import (
    TEXT,
    ArtifactFile,
    AuditRecord,
    Body,
    FileInfo,
    TranscriptMessage,
    WorkspaceInfo,
    decode_message,
)
from firefly_orm.artifacts._rules import DEFAULT_ACTOR, check_workspace_key
from firefly_orm.entry import (
    MemoryEntry,
    MemoryScope,
    derived_entry_id,
    new_entry_id,
    validate_user_id,
)
from firefly_orm.errors import StoreCorruptedError
from firefly_orm.long_term._model import keyed_entry_id

__all__ = [
    "MAX_NAME_SEGMENT",
    "REGISTRY_NAMESPACE",
    "Layout",
    "audit_record",
    "body_of",
    "file_info",
    "file_sha",
    "is_head_row",
    "stored_file",
    "transcript_message",
    "version_path",
    "workspace_info",
]

#: The namespace of every workspace's head row (one namespace for all of them).
REGISTRY_NAMESPACE = ARTIFACTS_NAMESPACE
#: Longest encoded key or owner inside a namespace name (longer ones are digested).
MAX_NAME_SEGMENT = 64

#: Between a path and a sha in a version row's key (paths never hold control characters).
_VERSION_KEY_SEPARATOR = "\x1f"


# --------------------------------------------------------------------------- layout


def _name_segment(text: str) -> str:
    """``text`` percent-encoded for a namespace name, or ``!`` + digest when too long.

    ``quote`` never leaves ``!`` or ``:`` or ``@`` unencoded, so the encoded
    forms never collide with each other, with a digest or with the separators.
    """
    encoded = quote(text, safe="")
    if len(encoded) <= MAX_NAME_SEGMENT:
        return encoded
    return "!" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class Layout:
    """Where one workspace's rows live (see the module docstring).

    Attributes:
        key: The workspace key.
        user_id: Its owner (``None``: shared).
        files: The namespace of the files.
        audit: The namespace of the audit log.
        versions: The namespace of the kept versions.
        transcript: The namespace of the transcript.
    """

    key: str
    user_id: str | None
    files: str
    audit: str
    versions: str
    transcript: str

    @classmethod
    def of(cls, key: str, user_id: str | None) -> Layout:
        """The layout of workspace ``key`` of ``user_id`` (both checked)."""
        key = check_workspace_key(key)
        user_id = None if user_id is None else validate_user_id(user_id)
        base = f"{REGISTRY_NAMESPACE}:{_name_segment(key)}"
        if user_id is not None:
            base += f"@{_name_segment(user_id)}"
        return cls(
            key=key,
            user_id=user_id,
            files=base,
            audit=f"{base}:audit",
            versions=f"{base}:versions",
            transcript=f"{base}:transcript",
        )

    @property
    def registry(self) -> str:
        """The namespace of the head row."""
        return REGISTRY_NAMESPACE

    @property
    def family(self) -> tuple[str, ...]:
        """Every namespace of the workspace's content (the head row aside)."""
        return (self.files, self.audit, self.versions, self.transcript)

    @property
    def head_id(self) -> str:
        """The entry id of the workspace's head row."""
        return keyed_entry_id(REGISTRY_NAMESPACE, self.user_id, self.key)

    def file_id(self, path: str) -> str:
        """The entry id of the file row of ``path``."""
        return derived_entry_id(self.files, path)

    def owns(self, entry: MemoryEntry) -> bool:
        """Whether ``entry`` carries this workspace's owner (rows of others are not its own)."""
        return entry.user_id == self.user_id

    def is_file_row(self, entry: MemoryEntry) -> bool:
        """Whether ``entry`` is one of this workspace's file rows: the owner's, its id its key's."""
        return (
            self.owns(entry) and entry.key is not None and entry.entry_id == self.file_id(entry.key)
        )

    @staticmethod
    def version_key(path: str, sha256: str) -> str:
        """The key of a version row of ``path`` with ``sha256``."""
        return f"{path}{_VERSION_KEY_SEPARATOR}{sha256}"

    @staticmethod
    def versions_prefix(path: str) -> str:
        """The key prefix of every version row of ``path`` (and of no other path)."""
        return f"{path}{_VERSION_KEY_SEPARATOR}"

    # ------------------------------------------------------------------ rows
    def head_entry(self, created_at: datetime) -> MemoryEntry:
        """The head row of the workspace."""
        return MemoryEntry.from_dict(
            {
                "entry_id": self.head_id,
                "namespace": REGISTRY_NAMESPACE,
                "scope": MemoryScope.WORKING,
                "key": self.key,
                "content": {"key": self.key},
                "created_at": created_at,
                "user_id": self.user_id,
            }
        )

    def file_entry(
        self, path: str, body: Body, actor: str, reason: str, at: datetime, version: int = 1
    ) -> MemoryEntry:
        """The file row of ``path`` holding ``body`` (``version``: kept by an import)."""
        return MemoryEntry.from_dict(
            {
                "entry_id": self.file_id(path),
                "namespace": self.files,
                "scope": MemoryScope.WORKING,
                "key": path,
                "content": body.content(),
                "metadata": _file_metadata(body, actor, reason),
                "created_at": at,
                "version": version,
                "user_id": self.user_id,
            }
        )

    def version_entry(
        self, path: str, body: Body, actor: str, reason: str, at: datetime, version: int
    ) -> MemoryEntry:
        """A version row: ``body`` as written to ``path`` at ``at``, the file's ``version``."""
        metadata = _file_metadata(body, actor, reason)
        metadata["version"] = version
        return MemoryEntry.from_dict(
            {
                "entry_id": new_entry_id(),
                "namespace": self.versions,
                "scope": MemoryScope.WORKING,
                "key": self.version_key(path, body.sha256),
                "content": body.content(),
                "metadata": metadata,
                "created_at": at,
                "user_id": self.user_id,
            }
        )

    def audit_entry(self, record: AuditRecord) -> MemoryEntry:
        """The audit row of ``record`` (a new entry id; ``record.id`` is ignored)."""
        content = record.to_dict()
        del content["ts"]  # the row's created_at is the time
        return MemoryEntry.from_dict(
            {
                "entry_id": new_entry_id(),
                "namespace": self.audit,
                "scope": MemoryScope.WORKING,
                "key": record.path,
                "content": content,
                "created_at": record.at,
                "user_id": self.user_id,
            }
        )

    def message_entry(self, encoded: dict[str, Any], at: datetime) -> MemoryEntry:
        """A transcript row holding one encoded message (:func:`encode_message`)."""
        return MemoryEntry.from_dict(
            {
                "entry_id": new_entry_id(),
                "namespace": self.transcript,
                "scope": MemoryScope.CONVERSATION,
                "content": encoded,
                "created_at": at,
                "user_id": self.user_id,
            }
        )


def _file_metadata(body: Body, actor: str, reason: str) -> dict[str, Any]:
    return {
        "sha256": body.sha256,
        "size": body.size,
        "kind": body.kind,
        "actor": actor,
        "reason": reason,
    }


# --------------------------------------------------------------------------- rows -> results


def _where(entry: MemoryEntry) -> str:
    return f"entry {entry.entry_id!r} of {entry.namespace!r}"


def file_info(entry: MemoryEntry, path: str | None = None) -> FileInfo:
    """The :class:`FileInfo` of a file row (or of a version row, with its ``path``).

    Raises:
        StoreCorruptedError: The row is not laid out as a file.
    """
    meta = entry.metadata_
    try:
        sha = meta["sha256"]
        size = meta["size"]
        if not isinstance(sha, str) or isinstance(size, bool) or not isinstance(size, int):
            raise TypeError("sha256 or size of the wrong type")
        version = meta.get("version", entry.version) if path is not None else entry.version
        return FileInfo(
            path=path if path is not None else str(entry.key),
            sha256=sha,
            size=size,
            kind=str(meta.get("kind") or TEXT),
            updated_at=entry.created_at,
            version=int(version),
            actor=str(meta.get("actor") or DEFAULT_ACTOR),
            reason=str(meta.get("reason") or ""),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreCorruptedError(f"{_where(entry)} is not a file row: {exc}") from exc


def file_sha(entry: MemoryEntry | None) -> str:
    """The sha256 of a file row (``""`` for no row)."""
    return "" if entry is None else file_info(entry).sha256


def stored_file(entry: MemoryEntry, path: str | None = None) -> ArtifactFile:
    """The :class:`ArtifactFile` of a file row (or a version row, with its ``path``)."""
    body = Body.from_content(entry.content, _where(entry))
    return ArtifactFile(file_info(entry, path), body.data)


def body_of(entry: MemoryEntry) -> Body:
    """The :class:`Body` of a file or version row."""
    return Body.from_content(entry.content, _where(entry))


def version_path(entry: MemoryEntry) -> str:
    """The file path of a version row."""
    key = entry.key or ""
    path, sep, _ = key.rpartition(_VERSION_KEY_SEPARATOR)
    if not sep:
        raise StoreCorruptedError(f"{_where(entry)} is not a version row (key {key!r})")
    return path


def audit_record(entry: MemoryEntry) -> AuditRecord:
    """The :class:`AuditRecord` of an audit row."""
    content = entry.content
    if not isinstance(content, Mapping):
        raise StoreCorruptedError(f"{_where(entry)} is not an audit row")
    try:
        source = content.get("source")
        return AuditRecord(
            at=entry.created_at,
            op=str(content["op"]),
            path=str(content["path"]),
            old_sha=str(content.get("old_sha") or ""),
            new_sha=str(content.get("new_sha") or ""),
            actor=str(content.get("actor") or DEFAULT_ACTOR),
            reason=str(content.get("reason") or ""),
            source=None if source is None else str(source),
            moved=bool(content.get("moved", False)),
            id=entry.entry_id,
        )
    except KeyError as exc:
        raise StoreCorruptedError(f"{_where(entry)} is not an audit row: no {exc}") from exc


def transcript_message(entry: MemoryEntry) -> TranscriptMessage:
    """The :class:`TranscriptMessage` of a transcript row."""
    return TranscriptMessage(entry.created_at, decode_message(entry.content, _where(entry)))


def is_head_row(entry: MemoryEntry) -> bool:
    """Whether ``entry`` is a workspace's head row: keyed, its id derived from (owner, key)."""
    return entry.key is not None and entry.entry_id == keyed_entry_id(
        REGISTRY_NAMESPACE, entry.user_id, entry.key
    )


def workspace_info(entry: MemoryEntry) -> WorkspaceInfo:
    """The :class:`WorkspaceInfo` of a head row."""
    if entry.key is None:
        raise StoreCorruptedError(f"{_where(entry)} is not a workspace head")
    return WorkspaceInfo(key=entry.key, user_id=entry.user_id, created_at=entry.created_at)
