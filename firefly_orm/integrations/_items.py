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

from firefly_orm.conversation import ConversationTurn

__all__ = ["Texts", "flatten", "last_items", "split_texts"]

#: ``(user_prompt, assistant_response)``: the text a turn is indexed and counted by.
Texts = tuple[str, str]


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
