"""Artifact workspaces' input rules: paths, prefixes, keys, actors, reasons, shas and options.

Everything here is pure and checked before any I/O: a bad value raises an
:class:`~firefly_orm.errors.EntryValidationError` naming the argument, and
nothing is read or written.

**Paths** (:func:`check_path`): POSIX-relative, normalised (Unicode NFC,
``.`` segments dropped); absolute paths, ``..``, empty segments (``a//b``,
a trailing ``/``), backslashes, NUL and every other control character
(:func:`refused_character`), and the bookkeeping names of the directory
layout (a first segment ``audit``, ``meta`` or ``versions``, the path
``messages.json``; in any letter case) are refused with an
:class:`~firefly_orm.errors.EntryValidationError` naming ``path``, before
anything is read or written.

**Refused characters** (:func:`refused_character`), in paths, prefixes,
workspace keys and actors: every Unicode control character (category ``Cc``:
C0, DEL and the C1 range ``\\x80``-``\\x9f``, ``\\x85`` included), the
bidirectional embeddings, overrides, isolates and marks (U+061C, U+200E,
U+200F, U+202A-U+202E, U+2066-U+2069: they make a name display as another
one) and the line and paragraph separators (U+2028, U+2029).  Other format
characters (the zero-width joiners that emoji and many scripts need) are kept.

**Prefixes** (:func:`check_prefix`) are normalised with the same rules: the
complete segments (those followed by ``/``) as a path's (``.`` dropped;
``..``, an empty segment, absolute, backslashes refused), the last one kept as
typed, since a prefix matches a string (``"user"`` matches ``user/a`` and
``users.md``).  So ``./memory/``, ``memory/./`` and ``memory/`` are one
prefix, and ``memory//`` is refused.  A read-only prefix
(:func:`check_read_only_prefixes`) must also not be empty nor end in ``.`` or
``..`` (``memory/.``: a folder or a dot-file?), and it matches a path
whatever its letter case (:func:`read_only_prefix_of`), as the reserved names
do: a case-insensitive file system would merge ``MEMORY/x`` with
``memory/x`` on export.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any, TypedDict

from firefly_orm.errors import EntryValidationError

__all__ = [
    "DEFAULT_ACTOR",
    "DEFAULT_MAX_BYTES",
    "MAX_ACTOR_LENGTH",
    "MAX_FILE_BYTES",
    "MAX_KEY_LENGTH",
    "MAX_PATH_BYTES",
    "MAX_REASON_LENGTH",
    "MAX_SEGMENT_BYTES",
    "RESERVED_DIRS",
    "TRANSCRIPT_PATH",
    "WorkspaceOptions",
    "check_actor",
    "check_bool",
    "check_expected_sha",
    "check_max_bytes",
    "check_path",
    "check_prefix",
    "check_read_only_prefixes",
    "check_reason",
    "check_workspace_key",
    "read_only_prefix_of",
    "refused_character",
]

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

_HEX = frozenset("0123456789abcdef")


# --------------------------------------------------------------------------- checks


#: The characters refused in names (see the module docstring): every control
#: character (``Cc``), the bidirectional formatting characters, and the line and
#: paragraph separators.
_REFUSED = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


def refused_character(text: str) -> str | None:
    """The first character of ``text`` that no name may hold, or ``None``.

    Every Unicode control character (category ``Cc``: ``\\x00``-``\\x1f``,
    ``\\x7f``-``\\x9f``), the bidirectional formatting characters (U+061C,
    U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and the line and paragraph
    separators (U+2028, U+2029).
    """
    found = _REFUSED.search(text)
    return None if found is None else found.group()


def _describe(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``, or ``U+0085`` for a character without a name."""
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def _check_text(field: str, value: str, what: str) -> None:
    """No NUL or other refused character (:func:`refused_character`), no lone surrogates."""
    char = refused_character(value)
    if char is not None:
        if char == "\x00":
            raise EntryValidationError(field, f"{what} must not contain NUL characters")
        raise EntryValidationError(
            field,
            f"{what} must not contain control characters, bidirectional formatting "
            f"characters or line separators (found {_describe(char)})",
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
    """``prefix`` normalised with the path rules, if it can start a path.

    The segments followed by ``/`` are normalised as a path's (NFC, ``.``
    dropped; ``..``, an empty segment, a leading ``/`` and backslashes
    refused); the last one is kept as typed, since a prefix is matched as a
    string (``"user"`` matches ``"user/a"`` and ``"users.md"``; give
    ``"user/"`` for a folder).  ``""`` matches every path.

    Examples: ``"./memory/"`` and ``"memory/./"`` are ``"memory/"``;
    ``"memory//"`` is refused.

    Raises:
        EntryValidationError: Naming ``field``, with what is wrong.
    """
    if not isinstance(value, str):
        raise EntryValidationError(field, f"must be a string, got {type(value).__name__}")
    _check_text(field, value, "a prefix")
    prefix = unicodedata.normalize("NFC", value)
    if prefix.startswith("/") or "\\" in prefix:
        raise EntryValidationError(field, f"{prefix!r}: paths are relative and use '/'")
    *complete, last = prefix.split("/")
    folders: list[str] = []
    for segment in complete:
        if segment == "":
            raise EntryValidationError(field, f"{prefix!r} has an empty segment ('//')")
        if segment == "..":
            raise EntryValidationError(field, f"{prefix!r} contains '..'")
        if segment != ".":
            folders.append(segment + "/")
    normal = "".join(folders) + last
    if len(normal.encode("utf-8")) > MAX_PATH_BYTES:
        raise EntryValidationError(field, f"is longer than {MAX_PATH_BYTES} bytes")
    return normal


def check_read_only_prefixes(prefixes: Any) -> tuple[str, ...]:
    """The read-only prefixes, normalised (:func:`check_prefix`), distinct, order kept.

    Refused besides what :func:`check_prefix` refuses: an empty prefix (after
    normalisation: ``"./"`` too), and one whose last segment is ``.`` or
    ``..`` (``"memory/."``: write ``"memory/"`` for the folder).

    Raises:
        EntryValidationError: Naming ``read_only_prefixes``.
    """
    field = "read_only_prefixes"
    if prefixes is None:
        return ()
    if isinstance(prefixes, str | bytes) or not isinstance(prefixes, Iterable):
        raise EntryValidationError(field, "must be a list or tuple of prefixes, e.g. ('memory/',)")
    found: dict[str, str] = {}  # casefolded -> as given (normalised)
    for prefix in prefixes:
        checked = check_prefix(prefix, field)
        if not checked:
            raise EntryValidationError(
                field, f"{prefix!r} is empty: an empty prefix would make every path read-only"
            )
        if checked.rpartition("/")[2] in (".", ".."):
            raise EntryValidationError(
                field,
                f"{prefix!r} ends in '.' or '..': end a folder with '/' (e.g. 'memory/')",
            )
        found.setdefault(checked.casefold(), checked)
    return tuple(found.values())


def read_only_prefix_of(path: str, prefixes: tuple[str, ...]) -> str | None:
    """The first of ``prefixes`` that ``path`` starts with, in any letter case, or ``None``.

    ``path`` is a checked path (:func:`check_path`) and ``prefixes`` checked
    read-only prefixes (:func:`check_read_only_prefixes`), so both are
    normalised alike; letter case is ignored (``str.casefold``), as it is for
    the reserved names.
    """
    folded = path.casefold()
    for prefix in prefixes:
        if folded.startswith(prefix.casefold()):
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


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is ``True`` or ``False`` (not merely truthy)."""
    if not isinstance(value, bool):
        raise EntryValidationError(name, f"must be True or False, got {value!r}")
    return value


class WorkspaceOptions(TypedDict, total=False):
    """How a workspace handle behaves (the keyword options of every handle factory).

    Attributes:
        read_only_prefixes: Paths starting with one of these (normalised as
            paths are, in any letter case) cannot be written or deleted
            directly (:class:`ReadOnlyPathError`).  Default ``()``.
        reviewer: Whether this handle may ``promote`` files into its own
            read-only prefixes (default ``False``).  A handle with read-only
            prefixes and without this right (an agent's) cannot promote into
            them, so an agent cannot approve its own writes; a reviewer's
            handle either has no read-only prefixes or has ``reviewer=True``.
        audit: Append an :class:`AuditRecord` for every successful write and
            delete (default ``True``).
        keep_versions: Keep a snapshot of every written content, for
            ``history`` / ``read_version`` (default ``False``).
        max_bytes: The largest file accepted, in bytes (default
            :data:`DEFAULT_MAX_BYTES`, at most :data:`MAX_FILE_BYTES`).
    """

    read_only_prefixes: Iterable[str]
    reviewer: bool
    audit: bool
    keep_versions: bool
    max_bytes: int
