"""The file format of ``firefly-orm export`` / ``import``: writing and checking it.

An export file is UTF-8 JSON in one of three shapes: one conversation (what
:meth:`~firefly_orm.ConversationMemory.export_conversation` returns), a list of
them, or ``{"format_version": 1, "conversations": [...]}``.  Reading checks the
whole document before anything is imported.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "BUNDLE_KEYS",
    "CONVERSATION_KEYS",
    "EXPORT_FORMAT_VERSION",
    "conversations_in",
    "decode_export_file",
    "export_document",
]

#: Version of the ``export --all`` bundle.
EXPORT_FORMAT_VERSION = 1

#: Keys of one exported conversation (what ``export_conversation`` writes).
CONVERSATION_KEYS = frozenset({"conversation_id", "turns", "summary", "total_tokens"})
#: Keys of an ``export --all`` file.
BUNDLE_KEYS = frozenset({"format_version", "conversations"})
#: Byte-order marks of encodings an export file is never written in.
FOREIGN_BOMS = {
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\xfe\xff": "UTF-16",
    b"\xff\xfe": "UTF-16",
}


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def export_document(exported: list[dict[str, Any]], *, single: bool) -> Any:
    """What ``firefly-orm export`` writes: one conversation, or a versioned bundle."""
    if single and len(exported) == 1:
        return exported[0]
    return {"format_version": EXPORT_FORMAT_VERSION, "conversations": exported}


def decode_export_file(raw: bytes) -> Any:
    """The JSON document of an export file's bytes, or ``ValueError`` saying why not.

    UTF-8 only (a UTF-8 byte-order mark is accepted, UTF-16/32 ones are named);
    NaN/Infinity, integers too long to parse and nesting too deep for the parser
    are refused.
    """
    for bom, encoding in FOREIGN_BOMS.items():
        if raw.startswith(bom):
            raise ValueError(f"it is {encoding}-encoded; export files are UTF-8")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"it is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("it is not importable JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, integers too long
        raise ValueError(f"it is not JSON: {exc}") from None


def conversations_in(data: Any, override_id: str | None) -> list[dict[str, Any]]:
    """The conversations of an import document, in one of the shapes ``export`` writes.

    ``{"format_version": 1, "conversations": [...]}``, a list of conversations,
    or one conversation ``{"conversation_id", "turns", ...}``; each conversation
    has a list of ``turns`` and a ``conversation_id`` (unless ``override_id``).
    Raises ``ValueError`` naming what is wrong.
    """
    if isinstance(data, dict) and not BUNDLE_KEYS.isdisjoint(data):
        unknown = sorted(set(data) - BUNDLE_KEYS)
        if unknown:
            raise ValueError(f"unexpected key(s) {', '.join(map(repr, unknown))} in the file")
        version = data.get("format_version", EXPORT_FORMAT_VERSION)
        if version != EXPORT_FORMAT_VERSION or isinstance(version, bool):
            raise ValueError(
                f"format_version {version!r} is not supported (expected {EXPORT_FORMAT_VERSION})"
            )
        items = data.get("conversations")
        if not isinstance(items, list):
            raise ValueError(f'"conversations" must be a list, got {type(items).__name__}')
    elif isinstance(data, list):
        items = data
    elif isinstance(data, dict):
        items = [data]
    else:
        raise ValueError(f"expected a conversation object or a list, got {type(data).__name__}")
    for position, item in enumerate(items):
        where = f"conversations[{position}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: must be a conversation object, got {type(item).__name__}")
        unknown = sorted(set(item) - CONVERSATION_KEYS)
        if unknown:
            raise ValueError(f"{where}: unexpected key(s) {', '.join(map(repr, unknown))}")
        if not isinstance(item.get("turns"), list):
            raise ValueError(f'{where}: "turns" must be a list')
        if not override_id and not item.get("conversation_id"):
            raise ValueError(f'{where}: no "conversation_id" (or pass --conversation-id)')
    return items
