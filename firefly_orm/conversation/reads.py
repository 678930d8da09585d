"""The read transactions of a conversation: history, context, recent turns, a user's list.

Each takes the sync unit of work first (see :mod:`firefly_orm.conversation.ops`)
and reads only turn contents, newest first, in growing batches until the
window stops short of the oldest turn read (:mod:`firefly_orm.conversation.context`
decides where it stops).
"""

from __future__ import annotations

from typing import Any

from firefly_orm.conversation.context import (
    SUMMARY_CONTEXT_PREFIX,
    Content,
    ContextWindow,
    checked_turns,
    history_messages,
    message_style,
    newest_whole_turns,
    pinned_part,
    place_window,
    summary_message,
    turn_messages,
)
from firefly_orm.conversation.messages import Estimator
from firefly_orm.conversation.model import ConversationTurn
from firefly_orm.conversation.plan import FIRST_BATCH, Limits
from firefly_orm.conversation.rows import (
    HEAD_KEY,
    INDEX_NAMESPACE,
    TURN_KEY_PREFIX,
    conversation_namespace,
    head_from_entry,
    turn_from_entry,
)
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "read_context",
    "read_context_parts",
    "read_history",
    "read_recent",
    "read_user_conversations",
]


def read_history(uow: UnitOfWork, conversation_id: str, limits: Limits) -> list[Any]:
    """The raw messages of the newest whole turns within ``limits``, oldest first."""
    turns, window = _newest_window(
        uow,
        conversation_namespace(conversation_id),
        max_tokens=limits.max_tokens,
        max_messages=limits.max_messages,
        whole_turns=True,
    )
    return history_messages(turns, window, None)


def read_context(
    uow: UnitOfWork, conversation_id: str, limits: Limits, estimator: Estimator
) -> list[Any]:
    """The summary, the pinned turns, then the newest messages, within ``limits``."""
    summary, messages = read_context_parts(uow, conversation_id, limits, estimator)
    return messages if summary is None else [summary, *messages]


def read_context_parts(
    uow: UnitOfWork,
    conversation_id: str,
    limits: Limits,
    estimator: Estimator,
    style: str | None = None,
) -> tuple[Any | None, list[Any]]:
    """:func:`read_context` in two parts: the summary message (``None``: none), the rest.

    ``style`` (``"pydantic-ai"`` or ``"dict"``) forces the style of the summary
    and of turns without raw messages; ``None``: the style of the turns read.
    """
    namespace = conversation_namespace(conversation_id)
    head = head_from_entry(uow.entries.get_by_key(namespace, HEAD_KEY))
    max_tokens: int = limits.max_tokens
    max_messages = limits.max_messages
    with_summary = False
    if head.summary:
        cost = int(estimator.estimate(f"{SUMMARY_CONTEXT_PREFIX}{head.summary}"))
        if cost <= max_tokens and (max_messages is None or max_messages >= 1):
            with_summary = True
            max_tokens -= cost
            max_messages = None if max_messages is None else max_messages - 1
    pinned: list[Content] = []
    if limits.pin_count:
        pinned = checked_turns(
            uow.entries.list_contents(
                namespace, key_prefix=TURN_KEY_PREFIX, limit=limits.pin_count
            ),
            namespace,
        )
    kept, pinned_tokens, pinned_messages = pinned_part(
        pinned, max_tokens=max_tokens, max_messages=max_messages
    )
    max_tokens -= pinned_tokens
    max_messages = None if max_messages is None else max_messages - pinned_messages
    last_pinned = pinned[-1]["turn_id"] if pinned else -1
    recent, window = _newest_window(
        uow,
        namespace,
        max_tokens=max_tokens,
        max_messages=max_messages,
        whole_turns=False,
        after_turn_id=last_pinned,
    )
    if style is None:
        style = message_style([*pinned[:kept], *recent[window.turn :]])
    summary = summary_message(head.summary or "", style) if with_summary else None
    messages: list[Any] = []
    for content in pinned[:kept]:
        messages.extend(turn_messages(content, style))
    messages.extend(history_messages(recent, window, style))
    return summary, messages


def read_recent(uow: UnitOfWork, conversation_id: str, count: int) -> list[ConversationTurn]:
    """The newest ``count`` retained turns, oldest first."""
    rows = uow.entries.list(
        conversation_namespace(conversation_id),
        key_prefix=TURN_KEY_PREFIX,
        limit=count,
        newest_first=True,
    )
    return [turn_from_entry(row) for row in reversed(rows)]


def read_user_conversations(
    uow: UnitOfWork, user_id: str, limit: int | None, offset: int
) -> list[str]:
    """Ids of ``user_id``'s conversations, newest first (an indexed read of index rows)."""
    rows = uow.entries.list(
        INDEX_NAMESPACE,
        user_id=user_id,
        newest_first=True,
        limit=None if limit is None else offset + limit,
    )
    return [row.key for row in rows[offset:] if row.key is not None]


# --------------------------------------------------------------------------- internals


def _newest_window(
    uow: UnitOfWork,
    namespace: str,
    *,
    max_tokens: int | None,
    max_messages: int | None,
    whole_turns: bool,
    after_turn_id: int = -1,
) -> tuple[list[Content], ContextWindow]:
    """Read the newest turns in growing batches until the window fits inside them.

    Whole-turn windows take :func:`~firefly_orm.conversation.context.newest_whole_turns`
    when it answers (no turn in reach makes or answers a tool call).
    """
    batch = 4 * FIRST_BATCH
    while True:
        rows = uow.entries.list_contents(
            namespace, key_prefix=TURN_KEY_PREFIX, limit=batch, newest_first=True
        )
        plain = None
        if whole_turns and after_turn_id < 0:
            plain = newest_whole_turns(
                rows, namespace, max_tokens=max_tokens, max_messages=max_messages
            )
        if plain is not None:
            count, reached = plain
            turns: list[Content] = rows[::-1]
            window = ContextWindow(len(rows) - count, 0, reached)
        else:
            turns = checked_turns(rows[::-1], namespace)
            if after_turn_id >= 0:
                turns = [c for c in turns if c["turn_id"] > after_turn_id]
            window = place_window(
                turns, max_tokens=max_tokens, max_messages=max_messages, whole_turns=whole_turns
            )
        if not window.reached_oldest or len(rows) < batch or len(turns) < len(rows):
            return turns, window
        batch *= 4
