"""The portable form of a turn's raw messages (the pydantic-ai message codec).

pydantic-ai ``ModelMessage`` lists are stored as
``{"format": "pydantic-ai", "messages": <ModelMessagesTypeAdapter JSON>}`` and
come back as ``ModelMessage`` objects (after a restart, an export/import);
other JSON values are stored as ``{"format": "json", "messages": [...]}``.
pydantic-ai is an optional extra: without it only JSON values can be stored.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from firefly_orm.entry import check_json_structure
from firefly_orm.entry._json import load_json
from firefly_orm.errors import EntryValidationError, StoreCorruptedError

__all__ = [
    "check_encoded",
    "decode_raw_messages",
    "decode_turns_messages",
    "encode_raw_messages",
    "pydantic_ai_messages",
]

logger = logging.getLogger("firefly_orm")

_PYDANTIC_AI_FORMAT = "pydantic-ai"
_JSON_FORMAT = "json"

# ``pydantic_ai.messages`` once imported, or ``None`` when it is not installed
# (tests set it to ``[None]`` to act as if it were missing).
_pydantic_ai_cache: list[Any] = []


def pydantic_ai_messages() -> Any:
    """``pydantic_ai.messages`` or ``None`` when pydantic-ai is not installed."""
    if not _pydantic_ai_cache:
        try:
            import pydantic_ai.messages as messages
        except ImportError:
            _pydantic_ai_cache.append(None)
        else:
            _pydantic_ai_cache.append(messages)
    return _pydantic_ai_cache[0]


def encode_raw_messages(raw_messages: Any) -> dict[str, Any] | None:
    """Portable JSON form of a turn's raw messages (``None`` when there are none).

    pydantic-ai ``ModelMessage`` lists become
    ``{"format": "pydantic-ai", "messages": <ModelMessagesTypeAdapter JSON>}``;
    other JSON-serialisable lists become ``{"format": "json", "messages": [...]}``.

    Raises:
        TypeError: ``raw_messages`` is not a list/tuple, or holds values that are
            neither ModelMessage objects nor JSON-serialisable.
    """
    if raw_messages is None:
        return None
    if not isinstance(raw_messages, list | tuple):
        raise TypeError(f"raw_messages must be a list (or None), got {type(raw_messages).__name__}")
    if not raw_messages:
        return None
    messages_mod = pydantic_ai_messages()
    if messages_mod is not None and all(
        isinstance(m, messages_mod.ModelRequest | messages_mod.ModelResponse) for m in raw_messages
    ):
        dumped = messages_mod.ModelMessagesTypeAdapter.dump_python(list(raw_messages), mode="json")
        return {"format": _PYDANTIC_AI_FORMAT, "messages": dumped}
    check_json_structure("raw_messages", list(raw_messages))
    try:
        text = json.dumps(list(raw_messages), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            "raw_messages must be pydantic-ai ModelMessage objects or JSON-serialisable "
            f"values ({exc})"
        ) from None
    return {"format": _JSON_FORMAT, "messages": load_json(text)}


def check_encoded(value: Any) -> dict[str, Any] | None:
    """Accept an already-encoded raw-messages object (from an export), or raise."""
    if not value:
        return None
    if not isinstance(value, Mapping) or set(value) != {"format", "messages"}:
        raise EntryValidationError("raw_messages", "unknown raw_messages object")
    fmt, messages = value["format"], value["messages"]
    if fmt not in (_PYDANTIC_AI_FORMAT, _JSON_FORMAT) or not isinstance(messages, list):
        raise EntryValidationError("raw_messages", f"unknown raw_messages format {fmt!r}")
    check_json_structure("raw_messages", messages)
    try:
        text = json.dumps(messages, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise EntryValidationError("raw_messages", f"must be JSON ({exc})") from None
    messages_mod = pydantic_ai_messages()
    if fmt == _PYDANTIC_AI_FORMAT and messages_mod is not None:
        try:
            messages_mod.ModelMessagesTypeAdapter.validate_python(messages)
        except ValueError as exc:
            raise EntryValidationError(
                "raw_messages", f"invalid pydantic-ai messages ({exc})"
            ) from None
    return {"format": fmt, "messages": load_json(text)} if messages else None


def decode_raw_messages(stored: Any) -> list[Any]:
    """Inverse of :func:`encode_raw_messages`.

    pydantic-ai messages come back as ``ModelMessage`` objects; when pydantic-ai
    is not installed they come back as their JSON dicts (a warning is logged).
    """
    if not stored:
        return []
    if isinstance(stored, list):  # written by something else than this module
        return list(stored)
    if not isinstance(stored, Mapping):
        raise StoreCorruptedError(f"unreadable raw_messages object {stored!r:.80}")
    messages = stored.get("messages") or []
    if stored.get("format") == _PYDANTIC_AI_FORMAT:
        messages_mod = pydantic_ai_messages()
        if messages_mod is None:
            logger.warning(
                "raw_messages were stored as pydantic-ai messages but pydantic-ai is not "
                "installed; returning them as JSON dicts"
            )
            return list(messages)
        return list(messages_mod.ModelMessagesTypeAdapter.validate_python(messages))
    return list(messages)


def decode_turns_messages(stored_values: Iterable[Any]) -> list[Any]:
    """The messages of several turns, in order: :func:`decode_raw_messages` of each.

    The messages of consecutive pydantic-ai turns are validated in one
    ``ModelMessagesTypeAdapter.validate_python`` call: a history of many turns
    crosses into pydantic-core once, not once per turn.
    """
    messages: list[Any] = []
    run: list[Any] = []  # the JSON messages of the current run of pydantic-ai turns
    for stored in stored_values:
        fmt = stored.get("format") if isinstance(stored, dict) else None
        listed = stored.get("messages") if fmt is not None else None
        if fmt == _PYDANTIC_AI_FORMAT and isinstance(listed, list):
            run.extend(listed)
            continue
        if run:
            messages.extend(decode_raw_messages({"format": _PYDANTIC_AI_FORMAT, "messages": run}))
            run = []
        if fmt == _JSON_FORMAT and isinstance(listed, list):
            messages.extend(listed)  # decode_raw_messages's answer, without its checks again
        else:
            messages.extend(decode_raw_messages(stored))
    if run:
        messages.extend(decode_raw_messages({"format": _PYDANTIC_AI_FORMAT, "messages": run}))
    return messages
