"""Artifact workspaces' values: file bodies and what the operations return.

Everything here is pure (no I/O).

**Bodies.**  A file holds bytes.  Text files keep their text
(``{"kind": "text", "text": ...}``), JSON files the JSON text written by
:func:`json_text` (``{"kind": "json", "text": ...}``, parsed again on
``read_json``), binary files base64 (``{"kind": "bytes", "base64": ...}``).
``sha256`` and ``size`` are those of the bytes (UTF-8 for text), which is
what a file of the workspace exported to a directory holds.

**Results.**  :class:`FileInfo` (``stat``, ``history``), :class:`ArtifactFile`
(a file's bytes with its info), :class:`AuditRecord`,
:class:`TranscriptMessage`, :class:`WorkspaceInfo` and
:class:`WorkspaceSnapshot` (what an export writes and an import reads).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from firefly_orm.artifacts._rules import DEFAULT_ACTOR, check_actor, check_path, check_reason
from firefly_orm.conversation._codec import decode_raw_messages, encode_raw_messages
from firefly_orm.conversation._model import check_int
from firefly_orm.entry import utcnow, validate_json_value
from firefly_orm.entry._json import JSONInputError, load_untrusted_json
from firefly_orm.errors import EntryValidationError, StoreCorruptedError

__all__ = [
    "BYTES",
    "JSON",
    "KINDS",
    "TEXT",
    "ArtifactFile",
    "AuditRecord",
    "Body",
    "FileInfo",
    "TranscriptMessage",
    "WorkspaceInfo",
    "WorkspaceSnapshot",
    "body_of_kind",
    "check_snapshot",
    "decode_message",
    "encode_message",
    "json_text",
    "transcript_from_json",
]

#: A text file.
TEXT = "text"
#: A JSON file (its text is :func:`json_text` of the value).
JSON = "json"
#: A binary file.
BYTES = "bytes"
#: The kinds of file.
KINDS = (TEXT, JSON, BYTES)


# --------------------------------------------------------------------------- bodies


def json_text(value: Any, field: str = "value") -> str:
    """The text a JSON file holds: ``json.dumps(value, indent=2, sort_keys=True)``.

    The same text Flyte's ``write_json`` writes (without its ``default=str``:
    values that are not JSON are refused), so a file's sha256 does not depend
    on which of the two wrote it.

    Raises:
        EntryValidationError: ``value`` is not JSON (NaN, a set, keys of mixed
            types, too deep, a lone surrogate...).
    """
    validate_json_value(field, value)
    try:
        return json.dumps(value, indent=2, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise EntryValidationError(field, f"must be JSON with sortable keys ({exc})") from None


@dataclass(frozen=True)
class Body:
    """A file's content as stored: its kind and its bytes (and text, for text and JSON).

    Build one with :meth:`of_text`, :meth:`of_json` or :meth:`of_bytes`.
    """

    kind: str
    data: bytes
    text: str | None = None

    @classmethod
    def of_text(cls, text: Any, kind: str = TEXT, field: str = "text") -> Body:
        """A text body (``kind="json"`` for JSON text already serialised)."""
        if not isinstance(text, str):
            raise EntryValidationError(field, f"must be a str, got {type(text).__name__}")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise EntryValidationError(field, "must be valid Unicode (a lone surrogate)") from None
        return cls(kind, data, text)

    @classmethod
    def of_json(cls, value: Any, field: str = "value") -> Body:
        """The body of a JSON file holding ``value`` (see :func:`json_text`)."""
        return cls.of_text(json_text(value, field), JSON, field)

    @classmethod
    def of_bytes(cls, data: Any, field: str = "data") -> Body:
        """A binary body (``bytes``, ``bytearray`` or ``memoryview``)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise EntryValidationError(
                field, f"must be bytes, bytearray or memoryview, got {type(data).__name__}"
            )
        return cls(BYTES, bytes(data))

    @classmethod
    def of_file_bytes(cls, data: bytes) -> Body:
        """A file read from elsewhere (a directory): text when it is UTF-8, else binary."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return cls(BYTES, data)
        return cls(TEXT, data, text)

    @property
    def sha256(self) -> str:
        """The sha256 of the bytes (hex)."""
        return hashlib.sha256(self.data).hexdigest()

    @property
    def size(self) -> int:
        """How many bytes."""
        return len(self.data)

    def content(self) -> dict[str, Any]:
        """The entry content that stores this body."""
        if self.text is not None:
            return {"kind": self.kind, "text": self.text}
        return {"kind": self.kind, "base64": base64.b64encode(self.data).decode("ascii")}

    @classmethod
    def from_content(cls, content: Any, where: str) -> Body:
        """The body an entry's content holds.

        Raises:
            StoreCorruptedError: The content is not a body (``where`` names the row).
        """
        if isinstance(content, Mapping):
            kind = content.get("kind")
            if kind in (TEXT, JSON) and isinstance(content.get("text"), str):
                return cls.of_text(content["text"], kind)
            if kind == BYTES and isinstance(content.get("base64"), str):
                try:
                    return cls(BYTES, base64.b64decode(content["base64"], validate=True))
                except (binascii.Error, ValueError):
                    pass
        raise StoreCorruptedError(f"{where} does not hold a file body")


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class FileInfo:
    """What is known of one file (``stat``), or of one kept version of it (``history``).

    Attributes:
        path: The file's path.
        sha256: The sha256 of its bytes (hex); pass it as ``expected_sha``.
        size: Its size in bytes.
        kind: ``"text"``, ``"json"`` or ``"bytes"``.
        updated_at: When it was written (timezone-aware UTC).
        version: How many times it was written since it was (re)created (the
            write that made it is 1).
        actor: Who wrote it.
        reason: Why (may be ``""``).
    """

    path: str
    sha256: str
    size: int
    kind: str
    updated_at: datetime
    version: int
    actor: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``updated_at`` in ISO 8601)."""
        return {
            "path": self.path,
            "sha256": self.sha256,
            "size": self.size,
            "kind": self.kind,
            "updated_at": self.updated_at.isoformat(),
            "version": self.version,
            "actor": self.actor,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class ArtifactFile:
    """A file's bytes with its :class:`FileInfo` (a current file, or a kept version).

    Build one for an import (:meth:`Artifacts.import_snapshot
    <firefly_orm.artifacts.Artifacts.import_snapshot>`) with :meth:`build`.
    """

    info: FileInfo
    data: bytes

    @property
    def path(self) -> str:
        """The file's path."""
        return self.info.path

    def text(self) -> str:
        """The bytes as UTF-8 text.

        Raises:
            EntryValidationError: They are not UTF-8 (a binary file).
        """
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError:
            raise EntryValidationError(
                "path", f"{self.info.path!r} is not UTF-8 text ({self.info.kind} file)"
            ) from None

    def json(self) -> Any:
        """The text parsed as JSON.

        Raises:
            EntryValidationError: It is not JSON.
        """
        try:  # bounded: a 100,000-deep or 5,000-digit file is refused, not a traceback
            return load_untrusted_json(self.text(), allow_constants=True)
        except JSONInputError as exc:
            raise EntryValidationError(
                "path", f"{self.info.path!r} does not hold JSON ({exc})"
            ) from None

    @classmethod
    def build(
        cls,
        path: str,
        data: bytes | str,
        *,
        kind: str | None = None,
        actor: str = DEFAULT_ACTOR,
        reason: str = "",
        updated_at: datetime | None = None,
        version: int = 1,
    ) -> ArtifactFile:
        """A file from its content and metadata; sha256 and size are computed.

        ``data`` is bytes or text; ``kind`` defaults to ``"text"`` for UTF-8
        content and ``"bytes"`` otherwise (``"json"`` requires JSON text).
        Checked again when imported.
        """
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        body = body_of_kind(raw, kind, "data")
        info = FileInfo(
            path=check_path(path),
            sha256=body.sha256,
            size=body.size,
            kind=body.kind,
            updated_at=updated_at if updated_at is not None else utcnow(),
            version=version,
            actor=check_actor(actor),
            reason=check_reason(reason),
        )
        return cls(info, raw)


def body_of_kind(data: bytes, kind: str | None, field: str = "data") -> Body:
    """``data`` as a body of ``kind`` (``None``: guessed by :meth:`Body.of_file_bytes`).

    Raises:
        EntryValidationError: ``data`` cannot be a file of that kind (a text or
            JSON file that is not UTF-8, a JSON file that is not JSON).
    """
    if kind is None:
        return Body.of_file_bytes(data)
    if kind == BYTES:
        return Body(BYTES, data)
    if kind in (TEXT, JSON):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise EntryValidationError(field, f"a {kind} file must be UTF-8") from None
        if kind == JSON:
            try:  # bounded, as every JSON read from outside (entry._json)
                load_untrusted_json(text, allow_constants=True)
            except JSONInputError as exc:
                raise EntryValidationError(field, f"a json file must hold JSON ({exc})") from None
        return Body(kind, data, text)
    raise EntryValidationError("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")


@dataclass(frozen=True)
class AuditRecord:
    """One audit row: a successful write, delete or promotion.

    Attributes:
        at: When (timezone-aware UTC; the order of the log).
        op: ``"create"``, ``"update"``, ``"delete"`` or ``"promote"``.
        path: The file written or deleted (for a promotion: the destination).
        old_sha: Its sha256 before (``""``: it did not exist).
        new_sha: Its sha256 after (``""``: deleted).
        actor: Who did it.
        reason: Why (may be ``""``).
        source: For a promotion, the file promoted (else ``None``).
        moved: For a promotion, whether the source was deleted with it.
        id: The audit row's entry id.
    """

    at: datetime
    op: str
    path: str
    old_sha: str
    new_sha: str
    actor: str
    reason: str
    source: str | None = None
    moved: bool = False
    id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``ts`` (ISO 8601), ``op``, ``path``, the shas, ``actor``,
        ``reason``, and ``source`` / ``moved`` for a promotion."""
        data: dict[str, Any] = {
            "ts": self.at.isoformat(),
            "op": self.op,
            "path": self.path,
            "old_sha": self.old_sha,
            "new_sha": self.new_sha,
            "actor": self.actor,
            "reason": self.reason,
        }
        if self.source is not None:
            data.update(source=self.source, moved=self.moved)
        return data


@dataclass(frozen=True)
class TranscriptMessage:
    """One stored transcript message and when it was appended.

    Attributes:
        at: When it was appended (timezone-aware UTC; the order of the transcript).
        message: The message as it was appended: a pydantic-ai ``ModelMessage``
            (when pydantic-ai is installed) or a JSON value.
    """

    at: datetime
    message: Any

    def to_json(self) -> Any:
        """The message as JSON (pydantic-ai messages in their portable JSON form)."""
        encoded = encode_raw_messages([self.message])
        return None if encoded is None else encoded["messages"][0]


def transcript_from_json(messages: Any) -> list[Any]:
    """Messages read from JSON (a ``messages.json``), as ``ArtifactWorkspace.extend`` takes them.

    When pydantic-ai is installed and every message is a pydantic-ai message
    in its JSON form (``{"kind": "request" | "response", "parts": [...]}``),
    they come back as ``ModelMessage`` objects; otherwise as they are.

    Raises:
        EntryValidationError: ``messages`` is not a list.
    """
    if not isinstance(messages, list):
        raise EntryValidationError("messages", "must be a JSON list of messages")
    shaped = bool(messages) and all(
        isinstance(m, Mapping) and m.get("kind") in ("request", "response") and "parts" in m
        for m in messages
    )
    if not shaped:
        return list(messages)
    try:
        return decode_raw_messages({"format": "pydantic-ai", "messages": messages})
    except ValueError:
        return list(messages)


def encode_message(message: Any, field: str = "message") -> dict[str, Any]:
    """The stored (portable) form of one transcript message.

    Raises:
        EntryValidationError: It is neither a pydantic-ai message nor JSON.
    """
    if message is None:
        raise EntryValidationError(field, "must not be None")
    try:
        encoded = encode_raw_messages([message])
    except TypeError as exc:
        raise EntryValidationError(field, str(exc).replace("raw_messages", field)) from None
    assert encoded is not None  # one message never encodes to nothing
    return encoded


def decode_message(content: Any, where: str) -> Any:
    """The message a transcript row's content holds."""
    try:
        decoded = decode_raw_messages(content)
    except (StoreCorruptedError, ValueError) as exc:
        raise StoreCorruptedError(f"{where} does not hold a transcript message ({exc})") from exc
    if len(decoded) != 1:
        raise StoreCorruptedError(f"{where} does not hold one transcript message")
    return decoded[0]


@dataclass(frozen=True)
class WorkspaceInfo:
    """A workspace as the registry knows it.

    Attributes:
        key: Its key.
        user_id: Its owner (``None``: a shared workspace).
        created_at: When it was created (timezone-aware UTC).
    """

    key: str
    user_id: str | None
    created_at: datetime


@dataclass
class WorkspaceSnapshot:
    """Everything a workspace holds, as plain objects: what an export writes and an import reads.

    Attributes:
        key: The workspace key.
        user_id: Its owner (``None``: shared).
        created_at: When it was created.
        files: The current files, sorted by path.
        audit: The audit log, oldest first.
        versions: The kept versions, oldest first.
        messages: The transcript, oldest first.
    """

    key: str
    user_id: str | None = None
    created_at: datetime = field(default_factory=utcnow)
    files: list[ArtifactFile] = field(default_factory=list)
    audit: list[AuditRecord] = field(default_factory=list)
    versions: list[ArtifactFile] = field(default_factory=list)
    messages: list[TranscriptMessage] = field(default_factory=list)


# --------------------------------------------------------------------------- import checks


def check_snapshot(
    snapshot: WorkspaceSnapshot, max_bytes: int
) -> tuple[list[Body], list[Body], list[dict[str, Any]]]:
    """A snapshot's parts checked for an import: file and version bodies, encoded messages.

    Every part is checked against what it claims (paths, shas against the
    bytes, sizes against ``max_bytes``, audit records, times).

    Raises:
        EntryValidationError: Naming the bad part (``files[3].sha256``).
    """
    bodies = _checked_files("files", snapshot.files, max_bytes)
    version_bodies = _checked_files("versions", snapshot.versions, max_bytes)
    if len({f.info.path for f in snapshot.files}) != len(snapshot.files):
        raise EntryValidationError("files", "two files have the same path")
    _check_audit(snapshot.audit)
    for i, message in enumerate(snapshot.messages):
        if not isinstance(message, TranscriptMessage):
            raise EntryValidationError(f"messages[{i}]", "must be a TranscriptMessage")
        _check_aware(f"messages[{i}].at", message.at)
    _check_aware("created_at", snapshot.created_at)
    encoded = [encode_message(m.message, f"messages[{i}]") for i, m in enumerate(snapshot.messages)]
    return bodies, version_bodies, encoded


def _checked_files(part: str, files: Any, max_bytes: int) -> list[Body]:
    """The bodies of a snapshot's files (or versions), each checked against its info."""
    if not isinstance(files, list | tuple):
        raise EntryValidationError(part, "must be a list of ArtifactFile")
    bodies: list[Body] = []
    for i, file in enumerate(files):
        where = f"{part}[{i}]"
        if not isinstance(file, ArtifactFile) or not isinstance(file.info, FileInfo):
            raise EntryValidationError(where, "must be an ArtifactFile")
        info = file.info
        try:
            check_path(info.path)
            check_actor(info.actor)
            check_reason(info.reason)
            check_int("version", info.version, 1)
            if not isinstance(file.data, bytes):
                raise EntryValidationError("data", "must be bytes")
            body = body_of_kind(file.data, info.kind)
            if body.sha256 != info.sha256:
                raise EntryValidationError(
                    "sha256", f"is {info.sha256!r} but the bytes hash to {body.sha256!r}"
                )
            if body.size != info.size:
                raise EntryValidationError(
                    "size", f"is {info.size} but there are {body.size} bytes"
                )
            if body.size > max_bytes:
                raise EntryValidationError("size", f"is more than max_bytes ({max_bytes})")
            _check_aware("updated_at", info.updated_at)
        except EntryValidationError as exc:
            message = str(exc).removeprefix(f"{exc.field}: ")
            raise EntryValidationError(f"{where}.{exc.field}", message) from None
        bodies.append(body)
    return bodies


def _check_audit(records: Any) -> None:
    if not isinstance(records, list | tuple):
        raise EntryValidationError("audit", "must be a list of AuditRecord")
    for i, record in enumerate(records):
        if not isinstance(record, AuditRecord):
            raise EntryValidationError(f"audit[{i}]", "must be an AuditRecord")
        if not isinstance(record.op, str) or not record.op:
            raise EntryValidationError(f"audit[{i}].op", "must be a non-empty string")
        _check_aware(f"audit[{i}].at", record.at)


def _check_aware(field: str, value: Any) -> None:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise EntryValidationError(field, "must be a timezone-aware datetime")
