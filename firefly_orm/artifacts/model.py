"""Artifact workspaces: the rules, the result models, the errors and how rows are laid out.

Everything here is pure (no I/O); :mod:`firefly_orm.artifacts.ops` runs the
transactions over it and :mod:`firefly_orm.artifacts.workspace` is the public
face.

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
                                                       form of :mod:`firefly_orm.conversation.codec`
========================  ===========================  =========================================

``<k>`` and ``<u>`` are the workspace key and the owner, percent-encoded
(``urllib.parse.quote`` with no safe characters), or ``!`` and a digest when
that would be longer than :data:`MAX_NAME_SEGMENT` characters; so every
(owner, key) pair has namespaces of its own and their length stays bounded.

**Bodies.**  A file holds bytes.  Text files keep their text
(``{"kind": "text", "text": ...}``), JSON files the JSON text written by
:func:`json_text` (``{"kind": "json", "text": ...}``, parsed again on
``read_json``), binary files base64 (``{"kind": "bytes", "base64": ...}``).
``sha256`` and ``size`` are those of the bytes (UTF-8 for text), which is
what a file of the workspace exported to a directory holds.

**Paths** (:func:`check_path`): POSIX-relative, normalised (Unicode NFC,
``.`` segments dropped); absolute paths, ``..``, empty segments (``a//b``,
a trailing ``/``), backslashes, NUL and other control characters, and the
bookkeeping names of the directory layout (a first segment ``audit``,
``meta`` or ``versions``, the path ``messages.json``; in any letter case) are
refused with an :class:`~firefly_orm.errors.EntryValidationError` naming
``path``, before anything is read or written.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict
from urllib.parse import quote

from firefly_orm.conversation.codec import decode_raw_messages, encode_raw_messages
from firefly_orm.entry import (
    MemoryEntry,
    MemoryScope,
    derived_entry_id,
    new_entry_id,
    utcnow,
    validate_json_value,
    validate_user_id,
)
from firefly_orm.errors import (
    ConcurrencyError,
    EntryValidationError,
    FireflyOrmError,
    StoreCorruptedError,
)
from firefly_orm.long_term.model import keyed_entry_id

__all__ = [
    "BYTES",
    "DEFAULT_ACTOR",
    "DEFAULT_MAX_BYTES",
    "JSON",
    "KINDS",
    "MAX_FILE_BYTES",
    "MAX_KEY_LENGTH",
    "MAX_PATH_BYTES",
    "MAX_SEGMENT_BYTES",
    "REGISTRY_NAMESPACE",
    "RESERVED_DIRS",
    "TEXT",
    "TRANSCRIPT_PATH",
    "ArtifactFile",
    "AuditRecord",
    "Body",
    "FileInfo",
    "Layout",
    "ReadOnlyPathError",
    "ShaMismatchError",
    "TranscriptMessage",
    "WorkspaceExistsError",
    "WorkspaceInfo",
    "WorkspaceOptions",
    "WorkspaceSnapshot",
    "body_of_kind",
    "check_actor",
    "check_expected_sha",
    "check_max_bytes",
    "check_prefix",
    "check_path",
    "check_read_only_prefixes",
    "check_reason",
    "check_workspace_key",
    "json_text",
    "read_only_prefix_of",
    "transcript_from_json",
]

#: The namespace of every workspace's head row (one namespace for all of them).
REGISTRY_NAMESPACE = "artifacts"
#: First path segments reserved for the bookkeeping of the directory layout.
RESERVED_DIRS = ("audit", "meta", "versions")
#: The transcript's file in the directory layout (reserved as a path).
TRANSCRIPT_PATH = "messages.json"
#: Longest path, in UTF-8 bytes.
MAX_PATH_BYTES = 1024
#: Longest path segment, in UTF-8 bytes (what file systems accept as a file name).
MAX_SEGMENT_BYTES = 255
#: Longest workspace key, in characters.
MAX_KEY_LENGTH = 200
#: Longest encoded key or owner inside a namespace name (longer ones are digested).
MAX_NAME_SEGMENT = 64
#: Longest ``actor``, in characters.
MAX_ACTOR_LENGTH = 200
#: Longest ``reason``, in characters.
MAX_REASON_LENGTH = 10_000
#: The default largest file a workspace accepts, in bytes (4 MiB).
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
#: The largest ``max_bytes`` a workspace may be given (8 MiB: a base64 body and its
#: snapshot still fit one MongoDB document with room to spare).
MAX_FILE_BYTES = 8 * 1024 * 1024
#: Who wrote, when the caller does not say.
DEFAULT_ACTOR = "agent"

#: A text file.
TEXT = "text"
#: A JSON file (its text is :func:`json_text` of the value).
JSON = "json"
#: A binary file.
BYTES = "bytes"
#: The kinds of file.
KINDS = (TEXT, JSON, BYTES)

#: Between a path and a sha in a version row's key (paths never hold control characters).
_VERSION_KEY_SEPARATOR = "\x1f"
_HEX = frozenset("0123456789abcdef")


# --------------------------------------------------------------------------- errors


class ShaMismatchError(ConcurrencyError):
    """A compare-and-set found another content than ``expected_sha``; nothing was written.

    Attributes:
        path: The file.
        expected_sha: What the caller expected (``""``: that the file does not exist).
        current_sha: The file's sha256 now (``""``: it does not exist).  Read it
            again, merge, and retry with this sha.
    """

    def __init__(self, path: str, expected_sha: str, current_sha: str) -> None:
        self.path = path
        self.expected_sha = expected_sha
        self.current_sha = current_sha
        now = current_sha or "absent"
        wanted = expected_sha or "absent"
        super().__init__(
            f"{path!r} changed: its current sha is {now} (expected {wanted}); nothing was written"
        )


class ReadOnlyPathError(FireflyOrmError, PermissionError):
    """A direct write or delete under a read-only prefix; nothing was written.

    Attributes:
        path: The file.
        prefix: The read-only prefix it is under.
    """

    def __init__(self, path: str, prefix: str, what: str = "written") -> None:
        self.path = path
        self.prefix = prefix
        super().__init__(
            f"{path!r} is under the read-only prefix {prefix!r} and cannot be {what} directly; "
            "a trusted reviewer copies files there with promote()"
        )


class WorkspaceExistsError(FireflyOrmError):
    """``create`` (or an import without ``replace``) found the workspace already there."""


# --------------------------------------------------------------------------- checks


def _check_text(field: str, value: str, what: str) -> None:
    """No NUL or other control characters, no lone surrogates."""
    for char in value:
        if char < " " or char == "\x7f":
            if char == "\x00":
                raise EntryValidationError(field, f"{what} must not contain NUL characters")
            raise EntryValidationError(
                field, f"{what} must not contain control characters (found {char!r})"
            )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise EntryValidationError(
            field, f"{what} must be valid Unicode (a lone surrogate)"
        ) from None


def check_path(value: Any, field: str = "path") -> str:
    """``path`` normalised, if it is a usable file path (see the module docstring).

    Raises:
        EntryValidationError: Naming ``field``, with what is wrong.
    """
    if not isinstance(value, str):
        raise EntryValidationError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise EntryValidationError(field, "must not be empty")
    _check_text(field, value, "a path")
    path = unicodedata.normalize("NFC", value)
    if "\\" in path:
        raise EntryValidationError(field, f"{path!r}: use '/' between segments, not '\\'")
    if path.startswith("/"):
        raise EntryValidationError(field, f"{path!r} is absolute; paths are relative")
    segments: list[str] = []
    for segment in path.split("/"):
        if segment == "":
            raise EntryValidationError(
                field, f"{path!r} has an empty segment ('//' or a trailing '/')"
            )
        if segment == "..":
            raise EntryValidationError(field, f"{path!r} contains '..'")
        if segment == ".":
            continue
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise EntryValidationError(
                field, f"a segment of {path[:40]!r}... is longer than {MAX_SEGMENT_BYTES} bytes"
            )
        segments.append(segment)
    if not segments:
        raise EntryValidationError(field, f"{path!r} names no file")
    normal = "/".join(segments)
    if len(normal.encode("utf-8")) > MAX_PATH_BYTES:
        raise EntryValidationError(field, f"is longer than {MAX_PATH_BYTES} bytes")
    if segments[0].casefold() in RESERVED_DIRS or normal.casefold() == TRANSCRIPT_PATH:
        raise EntryValidationError(
            field,
            f"{normal!r} is reserved for the workspace's bookkeeping "
            f"({', '.join(d + '/' for d in RESERVED_DIRS)} and {TRANSCRIPT_PATH}; any case)",
        )
    return normal


def check_prefix(value: Any, field: str = "prefix") -> str:
    """``prefix`` (NFC) if it can start a path: a string, relative, no control characters.

    A prefix is matched as a string (``"user"`` matches ``"user/a"`` and
    ``"users.md"``); give ``"user/"`` for a directory.  ``""`` matches every path.
    """
    if not isinstance(value, str):
        raise EntryValidationError(field, f"must be a string, got {type(value).__name__}")
    _check_text(field, value, "a prefix")
    prefix = unicodedata.normalize("NFC", value)
    if prefix.startswith("/") or "\\" in prefix:
        raise EntryValidationError(field, f"{prefix!r}: paths are relative and use '/'")
    return prefix


def check_read_only_prefixes(prefixes: Any) -> tuple[str, ...]:
    """The read-only prefixes as a tuple of distinct non-empty prefixes (order kept)."""
    if prefixes is None:
        return ()
    if isinstance(prefixes, str | bytes) or not isinstance(prefixes, Iterable):
        raise EntryValidationError(
            "read_only_prefixes", "must be a list or tuple of prefixes, e.g. ('memory/',)"
        )
    found: dict[str, None] = {}
    for prefix in prefixes:
        checked = check_prefix(prefix, "read_only_prefixes")
        if not checked:
            raise EntryValidationError(
                "read_only_prefixes", "an empty prefix would make every path read-only"
            )
        found[checked] = None
    return tuple(found)


def read_only_prefix_of(path: str, prefixes: tuple[str, ...]) -> str | None:
    """The first of ``prefixes`` that ``path`` starts with, or ``None``."""
    for prefix in prefixes:
        if path.startswith(prefix):
            return prefix
    return None


def check_workspace_key(key: Any, field: str = "key") -> str:
    """``key`` if it names a workspace: 1 to :data:`MAX_KEY_LENGTH` characters, no control ones."""
    if not isinstance(key, str) or not key:
        raise EntryValidationError(field, f"must be a non-empty string, got {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise EntryValidationError(field, f"must be at most {MAX_KEY_LENGTH} characters")
    _check_text(field, key, "a workspace key")
    return key


def check_actor(actor: Any) -> str:
    """``actor`` if it is a non-empty string of at most :data:`MAX_ACTOR_LENGTH` characters."""
    if not isinstance(actor, str) or not actor.strip():
        raise EntryValidationError("actor", f"must be a non-empty string, got {actor!r}")
    if len(actor) > MAX_ACTOR_LENGTH:
        raise EntryValidationError("actor", f"must be at most {MAX_ACTOR_LENGTH} characters")
    _check_text("actor", actor, "an actor")
    return actor


def check_reason(reason: Any) -> str:
    """``reason`` if it is a string of at most :data:`MAX_REASON_LENGTH` characters."""
    if not isinstance(reason, str):
        raise EntryValidationError("reason", f"must be a string, got {type(reason).__name__}")
    if len(reason) > MAX_REASON_LENGTH:
        raise EntryValidationError("reason", f"must be at most {MAX_REASON_LENGTH} characters")
    if "\x00" in reason:
        raise EntryValidationError("reason", "must not contain NUL characters")
    try:
        reason.encode("utf-8")
    except UnicodeEncodeError:
        raise EntryValidationError("reason", "must be valid Unicode (a lone surrogate)") from None
    return reason


def check_expected_sha(sha: Any, field: str = "expected_sha") -> str | None:
    """``None`` (no condition), ``""`` (must not exist) or a 64-hex sha256 (lower-cased)."""
    if sha is None:
        return None
    if not isinstance(sha, str):
        raise EntryValidationError(field, f"must be a sha256 hex string or '', got {sha!r}")
    lowered = sha.lower()
    if sha and (len(lowered) != 64 or not set(lowered) <= _HEX):
        raise EntryValidationError(
            field, f"must be 64 hex digits (a sha256) or '' (must not exist), got {sha!r}"
        )
    return lowered


def check_max_bytes(value: Any) -> int:
    """``value`` if it is a file size limit from 1 byte to :data:`MAX_FILE_BYTES`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_FILE_BYTES:
        raise EntryValidationError(
            "max_bytes", f"must be an integer from 1 to {MAX_FILE_BYTES}, got {value!r}"
        )
    return value


class WorkspaceOptions(TypedDict, total=False):
    """How a workspace handle behaves (the keyword options of every handle factory).

    Attributes:
        read_only_prefixes: Paths starting with one of these cannot be written
            or deleted directly (:class:`ReadOnlyPathError`); ``promote`` copies
            files there.  Default ``()``.
        audit: Append an :class:`AuditRecord` for every successful write and
            delete (default ``True``).
        keep_versions: Keep a snapshot of every written content, for
            ``history`` / ``read_version`` (default ``False``).
        max_bytes: The largest file accepted, in bytes (default
            :data:`DEFAULT_MAX_BYTES`, at most :data:`MAX_FILE_BYTES`).
    """

    read_only_prefixes: Iterable[str]
    audit: bool
    keep_versions: bool
    max_bytes: int


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
        try:
            return json.loads(self.text())
        except json.JSONDecodeError as exc:
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
            try:
                json.loads(text)
            except json.JSONDecodeError as exc:
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
        content: dict[str, Any] = {
            "op": record.op,
            "path": record.path,
            "old_sha": record.old_sha,
            "new_sha": record.new_sha,
            "actor": record.actor,
            "reason": record.reason,
        }
        if record.source is not None:
            content.update(source=record.source, moved=record.moved)
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


def workspace_info(entry: MemoryEntry) -> WorkspaceInfo:
    """The :class:`WorkspaceInfo` of a head row."""
    if entry.key is None:
        raise StoreCorruptedError(f"{_where(entry)} is not a workspace head")
    return WorkspaceInfo(key=entry.key, user_id=entry.user_id, created_at=entry.created_at)
