"""What a turn's stored raw messages say, read from their portable form (no decoding).

The window and eviction rules need three facts about each model message: the
text a model would read (for token estimates), whether a history may *open*
with it, and which tool calls it makes or answers.  This module reads them
from the encoded form of :mod:`firefly_orm.conversation._codec`
(``{"format": "pydantic-ai" | "json", "messages": [...]}``), so the planner and
the read path never build ``ModelMessage`` objects to decide what to keep.

Formats understood:

* **pydantic-ai** (``ModelRequest`` / ``ModelResponse`` as dumped by
  ``ModelMessagesTypeAdapter``): a request opens a history unless it carries a
  ``tool-return`` part or a ``retry-prompt`` part answering a tool call; a
  response's ``tool-call`` parts are calls, matched by ``tool_call_id``.
* **OpenAI-style dicts** (``{"role": ..., "content": ...}``): ``user``,
  ``system`` and ``developer`` messages open; an ``assistant`` message's
  ``tool_calls[*].id`` are calls; a ``tool`` message answers its
  ``tool_call_id``.  Anthropic-style content blocks (``tool_use`` /
  ``tool_result``) are read the same way.
* **Anything else** (JSON values without a ``role``): opaque, one message each,
  and a history may open anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

__all__ = [
    "MESSAGES_PER_PLAIN_TURN",
    "Estimator",
    "MessageInfo",
    "encoded_message_count",
    "estimate_turn",
    "inspect_encoded",
]

#: A turn stored without raw messages stands for two model messages
#: (the user's prompt and the assistant's answer).
MESSAGES_PER_PLAIN_TURN = 2

_PYDANTIC_AI = "pydantic-ai"
_OPENING_ROLES = frozenset({"user", "system", "developer"})
#: pydantic-ai part fields that carry what the model reads.
_TEXT_FIELDS = ("content", "args", "instructions")
#: ``isinstance`` over this answers at once for a dict (the usual case), without
#: the abstract class's slower check.
_MAPPINGS = (dict, Mapping)


class MessageInfo(NamedTuple):
    """The facts the window rules need about one model message (a named tuple:
    one is built per message on every write, and a frozen dataclass costs
    several times more to build).

    Attributes:
        text: What a model reads of it (prompts, answers, tool names, arguments
            and results), for token estimates.
        opens: A history may start with this message (a user or system message
            that answers no tool call).
        calls: Ids of the tool calls it makes.
        results: Ids of the tool calls it answers.
    """

    text: str
    opens: bool
    calls: tuple[str, ...] = ()
    results: tuple[str, ...] = ()


#: What ``with_text=False`` reads of a message that makes and answers no tool call
#: (shared: a :class:`MessageInfo` is immutable).
_OPENS = MessageInfo(text="", opens=True)
_CONTINUES = MessageInfo(text="", opens=False)


class Estimator(Protocol):
    """Anything with ``estimate(text) -> int`` (:class:`~firefly_orm.tokens.TokenEstimator`)."""

    def estimate(self, text: str) -> int: ...


def estimate_turn(
    estimator: Estimator, user_prompt: str, assistant_response: str, encoded: Any
) -> tuple[int, list[int] | None]:
    """A turn's token estimate, and one estimate per raw message (``None`` without them).

    Without raw messages: the estimate of ``"{user_prompt}\\n{assistant_response}"``.
    With raw messages: what the model reads of them (see :class:`MessageInfo`),
    one estimate per message, but never less than the prompt-and-answer
    estimate (raw messages normally contain both; the larger figure guards
    against raw messages that leave them out).  The per-message estimates add
    up to the turn's (any difference goes to the first message).
    """
    plain = int(estimator.estimate(f"{user_prompt}\n{assistant_response}"))
    infos = inspect_encoded(encoded)
    if not infos:
        return plain, None
    per_message = [int(estimator.estimate(info.text)) for info in infos]
    total = sum(per_message)
    if plain > total:
        per_message[0] += plain - total
        total = plain
    return total, per_message


def encoded_message_count(encoded: Any) -> int:
    """How many model messages a stored turn stands for (2 without raw messages)."""
    messages = encoded.get("messages") if isinstance(encoded, _MAPPINGS) else None
    if isinstance(messages, list) and messages:
        return len(messages)
    return MESSAGES_PER_PLAIN_TURN


def inspect_encoded(encoded: Any, *, with_text: bool = True) -> list[MessageInfo]:
    """One :class:`MessageInfo` per message of an encoded raw-messages object.

    ``None`` (no raw messages) gives ``[]``; a bare list (written by something
    else than the codec) is read as JSON messages.  ``with_text=False`` leaves
    ``text`` empty (the window rules do not need it; reads skip its cost).
    """
    if not encoded:
        return []
    if isinstance(encoded, list):
        return [_json_message(m, with_text) for m in encoded]
    if not isinstance(encoded, _MAPPINGS):
        return []
    messages = encoded.get("messages")
    if not isinstance(messages, list):
        return []
    if encoded.get("format") == _PYDANTIC_AI:
        return [_pydantic_ai_message(m, with_text) for m in messages]
    return [_json_message(m, with_text) for m in messages]


# --------------------------------------------------------------------------- pydantic-ai


def _pydantic_ai_message(message: Any, with_text: bool = True) -> MessageInfo:
    if not isinstance(message, Mapping):
        return MessageInfo(text=_as_text(message) if with_text else "", opens=True)
    parts = message.get("parts")
    parts = parts if isinstance(parts, list) else []
    texts: list[str] = []
    if isinstance(message.get("instructions"), str):
        texts.append(message["instructions"])
    calls: list[str] = []
    results: list[str] = []
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("part_kind")
        call_id = part.get("tool_call_id")
        if with_text:
            if isinstance(part.get("tool_name"), str) and kind in ("tool-call", "tool-return"):
                texts.append(part["tool_name"])
            texts.extend(
                _as_text(part[name]) for name in _TEXT_FIELDS if part.get(name) is not None
            )
        if not isinstance(call_id, str):
            continue
        if kind == "tool-call":
            calls.append(call_id)
        elif kind == "tool-return" or (kind == "retry-prompt" and part.get("tool_name")):
            results.append(call_id)
    is_request = message.get("kind") == "request"
    return MessageInfo(
        text="\n".join(t for t in texts if t) if with_text else "",
        opens=is_request and not results,
        calls=tuple(calls),
        results=tuple(results),
    )


# --------------------------------------------------------------------------- JSON dicts


def _json_message(message: Any, with_text: bool = True) -> MessageInfo:
    role = message.get("role") if isinstance(message, _MAPPINGS) else None
    if not isinstance(role, str):
        return MessageInfo(text=_as_text(message), opens=True) if with_text else _OPENS
    content = message.get("content")
    if role != "tool" and not message.get("tool_calls") and not isinstance(content, list):
        # The common message: no content blocks, no tool call made or answered.
        if not with_text:
            return _OPENS if role in _OPENING_ROLES else _CONTINUES
        if content is None or isinstance(content, str):
            return MessageInfo(text=content or "", opens=role in _OPENING_ROLES)
    texts: list[str] = []
    calls: list[str] = []
    results: list[str] = []
    if isinstance(content, list):
        for block in content:
            _read_block(block, texts, calls, results)
    elif content is not None:
        texts.append(_as_text(content))
    for call in _dicts(message.get("tool_calls")):
        function = call.get("function")
        if isinstance(function, Mapping):
            texts.extend(_as_text(function[k]) for k in ("name", "arguments") if k in function)
        if isinstance(call.get("id"), str):
            calls.append(call["id"])
    if role == "tool" and isinstance(message.get("tool_call_id"), str):
        results.append(message["tool_call_id"])
    return MessageInfo(
        text="\n".join(t for t in texts if t) if with_text else "",
        opens=role in _OPENING_ROLES and not results,
        calls=tuple(calls),
        results=tuple(results),
    )


def _read_block(block: Any, texts: list[str], calls: list[str], results: list[str]) -> None:
    """One content block of a dict message (text, ``tool_use`` or ``tool_result``)."""
    if isinstance(block, str):
        texts.append(block)
        return
    if not isinstance(block, Mapping):
        return
    kind = block.get("type")
    if kind == "tool_use":
        texts.extend(_as_text(block[k]) for k in ("name", "input") if k in block)
        if isinstance(block.get("id"), str):
            calls.append(block["id"])
    elif kind == "tool_result":
        if "content" in block:
            texts.append(_as_text(block["content"]))
        if isinstance(block.get("tool_use_id"), str):
            results.append(block["tool_use_id"])
    elif isinstance(block.get("text"), str):
        texts.append(block["text"])


def _dicts(value: Any) -> Iterable[Mapping[str, Any]]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [item for item in value if isinstance(item, Mapping)]
    return []


def _as_text(value: Any) -> str:
    """A value as the text a model would read (JSON for structured values)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)
