"""A conversation as a flat list of JSON items: the layout the adapters share.

A framework's session is a list of items (OpenAI Agents input items, LangChain
message dicts...).  It maps to one conversation of a
:class:`~firefly_orm.conversation.ConversationMemory`: each batch of items the
framework adds becomes one turn whose raw messages are those items, stored as
JSON, losslessly.  Every turn holds at least one item (an empty batch adds
none; removing a turn's last item deletes the turn), so the newest ``n`` turns
always hold the newest ``n`` items.  A turn stored without raw messages (by
``add_turn`` with text only) reads as a user item and an assistant item.

These helpers are pure: the adapters make the calls, sync or async.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from firefly_orm.conversation import ConversationMemory, ConversationTurn
from firefly_orm.errors import EntryValidationError

__all__ = ["Texts", "check_session", "flatten", "last_items", "split_texts"]

#: ``(user_prompt, assistant_response)``: the text a turn is indexed and counted by.
Texts = tuple[str, str]


def check_session(session_id: Any, memory: Any) -> str:
    """``session_id`` if it can be a conversation id and ``memory`` is a ``ConversationMemory``.

    Raises:
        EntryValidationError: ``session_id`` is not a non-empty string without NUL characters.
        TypeError: ``memory`` is not a ``ConversationMemory``.
    """
    if not isinstance(session_id, str) or not session_id or "\x00" in session_id:
        raise EntryValidationError(
            "session_id", "must be a non-empty string without NUL characters"
        )
    if not isinstance(memory, ConversationMemory):
        raise TypeError(f"memory must be a ConversationMemory, got {type(memory).__name__}")
    return session_id


def flatten(
    turns: Sequence[ConversationTurn], from_text: Callable[[str, str], list[Any]]
) -> list[Any]:
    """The items of ``turns``, oldest first; ``from_text(prompt, answer)`` for text-only turns."""
    items: list[Any] = []
    for turn in turns:
        if turn.raw_messages:
            items.extend(turn.raw_messages)
        else:
            items.extend(from_text(turn.user_prompt, turn.assistant_response))
    return items


def last_items(items: list[Any], limit: int | None) -> list[Any]:
    """The newest ``limit`` of ``items`` (all of them for ``None``), oldest first."""
    if limit is None:
        return items
    return items[-limit:] if limit else []


def split_texts(items: Sequence[Any], role_text: Callable[[Any], tuple[str, str] | None]) -> Texts:
    """The user text and the assistant text of ``items``, one line per item.

    ``role_text(item)`` gives an item's ``("user" | "assistant", text)`` or
    ``None`` for items that are neither (tool calls, reasoning...); their size
    still counts against the budget through the raw messages' estimate.
    """
    user: list[str] = []
    assistant: list[str] = []
    for item in items:
        found = role_text(item)
        if found is None:
            continue
        role, text = found
        (user if role == "user" else assistant).append(text)
    return "\n".join(user), "\n".join(assistant)
