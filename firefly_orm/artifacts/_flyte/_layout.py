"""Flyte's directory layout: its names, its error, and the rules both directions share.

The layout itself is described in :mod:`firefly_orm.artifacts._flyte`.  Here:
the bookkeeping paths, how a path becomes one file name (``quote``), how a
kept version's file is named and read back, times in ISO 8601 with their
microseconds, JSON written sorted and read strictly (no repeated key), and
the checks that restate a field's error as about the directory entry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, unquote

from firefly_orm.artifacts._rules import RESERVED_DIRS, check_path
from firefly_orm.entry._json import JSONInputError, load_untrusted_json
from firefly_orm.errors import EntryValidationError

__all__ = [
    "AUDIT_DIR",
    "AUDIT_LOG_PATH",
    "META_DIR",
    "META_KEYS",
    "SIDECAR_PATH",
    "VERSIONS_DIR",
    "LIVE_DIR",
    "LIVE_JOURNAL_PATH",
    "DirectoryLayoutError",
    "checked",
    "encoded_name",
    "exact_keys",
    "iso",
    "json_bytes",
    "meta_bytes",
    "meta_path",
    "mtime_ns",
    "mtime_of",
    "parse_json",
    "read_sha",
    "read_text",
    "read_time",
    "version_base",
    "version_name",
]

# RESERVED_DIRS is spelled once, in sorted order: ("audit", "meta", "versions").
AUDIT_DIR, META_DIR, VERSIONS_DIR = RESERVED_DIRS
#: The audit log of the layout.
AUDIT_LOG_PATH = f"{AUDIT_DIR}/log.jsonl"
#: What Flyte's layout has no place for (``quote`` never writes ``@``).
SIDECAR_PATH = f"{META_DIR}/@workspace.json"
#: The live workspace's own folder (its lock, journal and temporary files); readers skip it.
LIVE_DIR = f"{META_DIR}/@live"
#: A write the live workspace had begun and not finished (it finishes it on its next open).
LIVE_JOURNAL_PATH = f"{LIVE_DIR}/journal.json"
#: The keys of a file's metadata, in the order Flyte writes them.
META_KEYS = ("path", "sha256", "updated_at", "updated_by", "reason", "bytes")
#: A kept version's file name: ``<ts>_<sha256>[_<8 hex>].txt``, ``:`` in ts written ``-``.
_VERSION_NAME = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})T(?P<h>\d{2})-(?P<m>\d{2})-(?P<s>\d{2})(?P<frac>\.\d{1,6})?"
    r"(?P<tz>Z|[+-]\d{2}-\d{2})_(?P<sha>[0-9a-f]{64})(?:_(?P<salt>[0-9a-f]{8}))?\.txt"
)
_SHA = re.compile(r"[0-9a-f]{64}")
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


def iso(at: datetime) -> str:
    """``at`` in ISO 8601, UTC, with its microseconds."""
    return at.astimezone(UTC).isoformat()


def _version_stamp(at: datetime) -> str:
    """The time part of a version's file name (``:`` cannot be in every file name)."""
    return iso(at).replace(":", "-")


def encoded_name(path: str) -> str:
    """The single file name standing for ``path`` under ``meta/`` and ``versions/``."""
    return quote(path, safe="")


def meta_path(path: str) -> str:
    """Where the metadata of the file ``path`` goes: ``meta/<quote(path)>.json``."""
    return f"{META_DIR}/{encoded_name(path)}.json"


def version_base(path: str, at: datetime, sha256: str) -> str:
    """A kept version's file but for ``.txt``: ``versions/<quote(path)>/<time>_<sha256>``.

    :func:`version_name` reads such a name back.
    """
    return f"{VERSIONS_DIR}/{encoded_name(path)}/{_version_stamp(at)}_{sha256}"


def json_bytes(value: Any, *, indent: int | None = 2) -> bytes:
    """``value`` as UTF-8 JSON, keys sorted (``indent=None``: on one line)."""
    return json.dumps(value, indent=indent, sort_keys=True).encode("utf-8")


def meta_bytes(meta: Mapping[str, Any]) -> bytes:
    """A file's metadata as Flyte writes it: its :data:`META_KEYS` in that order, indented."""
    return json.dumps({k: meta[k] for k in META_KEYS}, indent=2).encode("utf-8")


def mtime_ns(at: datetime) -> int:
    """``at`` as a file's modification time in nanoseconds (to the microsecond)."""
    return (at - _EPOCH) // timedelta(microseconds=1) * 1_000


def mtime_of(ns: int) -> datetime:
    """A modification time in nanoseconds as a UTC time (to the microsecond)."""
    return _EPOCH + timedelta(microseconds=ns // 1_000)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"the key {key!r} appears twice")
        result[key] = value
    return result


def parse_json(data: bytes, where: str) -> Any:
    """The JSON value of a file's bytes, read strictly and within bounds.

    UTF-8, no key repeated in an object, and the bounds of
    :func:`~firefly_orm.entry._json.load_untrusted_json` (nesting, integer
    digits); NaN and Infinity are read as Python reads them (the values are
    checked again when written).

    Raises:
        DirectoryLayoutError: Naming ``where``, in one line.
    """
    try:
        return load_untrusted_json(data, object_pairs_hook=_no_duplicate_keys, allow_constants=True)
    except JSONInputError as exc:
        raise DirectoryLayoutError(where, str(exc)) from None


def read_time(value: Any, where: str, name: str) -> datetime:
    if not isinstance(value, str):
        raise DirectoryLayoutError(where, f"{name} must be an ISO 8601 time, got {value!r}")
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise DirectoryLayoutError(where, f"{name} {value!r} is not an ISO 8601 time") from None
    if at.tzinfo is None:
        raise DirectoryLayoutError(where, f"{name} {value!r} has no UTC offset")
    return at.astimezone(UTC)


def read_sha(value: Any, where: str, name: str, *, empty: bool = False) -> str:
    if isinstance(value, str) and ((empty and value == "") or _SHA.fullmatch(value)):
        return value
    wanted = "a sha256 (64 lower-case hex digits)" + (" or ''" if empty else "")
    raise DirectoryLayoutError(where, f"{name} must be {wanted}, got {value!r}")


def read_text(value: Any, where: str, name: str) -> str:
    if not isinstance(value, str):
        raise DirectoryLayoutError(where, f"{name} must be a string, got {value!r}")
    return value


def checked(where: str, check: Any, value: Any) -> Any:
    """``check(value)``, its :class:`EntryValidationError` restated as about ``where``."""
    try:
        return check(value)
    except EntryValidationError as exc:
        raise DirectoryLayoutError(where, str(exc)) from None


def exact_keys(obj: Any, keys: frozenset[str] | tuple[str, ...], where: str) -> Mapping[str, Any]:
    if not isinstance(obj, dict):
        raise DirectoryLayoutError(where, "must be a JSON object")
    missing = sorted(set(keys) - set(obj))
    unknown = sorted(set(obj) - set(keys))
    if missing:
        raise DirectoryLayoutError(where, f"lacks {', '.join(map(repr, missing))}")
    if unknown:
        raise DirectoryLayoutError(where, f"has unknown key(s) {', '.join(map(repr, unknown))}")
    return obj


def version_name(rel: str, where: str) -> tuple[str, datetime, str]:
    """``(path, time, sha256)`` a version file's place names: ``versions/<quote(path)>/<name>``."""
    parts = rel.split("/")
    if len(parts) != 3 or parts[0] != VERSIONS_DIR:
        raise DirectoryLayoutError(
            where, f"{rel!r} is not {VERSIONS_DIR}/<encoded path>/<time>_<sha256>.txt"
        )
    _, encoded, name = parts
    try:
        decoded = unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        decoded = ""
    if not decoded or encoded_name(decoded) != encoded:
        raise DirectoryLayoutError(where, f"{encoded!r} is not a percent-encoded path")
    path = checked(where, check_path, decoded)
    match = _VERSION_NAME.fullmatch(name)
    if match is None:
        raise DirectoryLayoutError(where, f"{name!r} is not named <time>_<sha256>.txt")
    tz = match["tz"].replace("-", ":") if match["tz"] != "Z" else "+00:00"
    stamp = f"{match['date']}T{match['h']}:{match['m']}:{match['s']}{match['frac'] or ''}{tz}"
    return path, read_time(stamp, where, "the time in its name"), match["sha"]
