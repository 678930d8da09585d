"""The read transactions of a conversation: history, context, recent turns and
messages, a user's list.

Each takes the sync unit of work first (see :mod:`firefly_orm.conversation._ops`)
and reads only turn contents, newest first.  The budgeted reads (history,
context) read a first batch, then only older rows, each batch sized from the
stored estimates of the rows already read, until the window stops short of the
oldest turn read (:mod:`firefly_orm.conversation._context` decides where it
stops); the last-N reads are one ``ORDER BY key DESC LIMIT n`` read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from firefly_orm.conversation._context import (
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
from firefly_orm.conversation._messages import Estimator
from firefly_orm.conversation._model import ConversationTurn
from firefly_orm.conversation._plan import FIRST_BATCH, Limits
from firefly_orm.conversation._rows import (
    HEAD_KEY,
    INDEX_NAMESPACE,
    TURN_KEY_PREFIX,
    conversation_namespace,
    head_from_entry,
    turn_from_entry,
    turn_key,
    turn_message_count,
)
from firefly_orm.protocols import UnitOfWork
from firefly_orm.uow import optional_operations

__all__ = [
    "read_context",
    "read_context_parts",
    "read_history",
    "read_recent",
    "read_recent_messages",
    "read_user_conversations",
]


def read_history(uow: UnitOfWork, conversation_id: str, limits: Limits) -> list[Any]:
    """The raw messages of the newest whole turns within ``limits``, oldest first.

    Never empty for a conversation with turns: when the newest turn alone
    exceeds the limits, its newest messages that fit, else the whole turn
    (:func:`~firefly_orm.conversation._context.place_window`'s ``keep_one``).
    """
    turns, window = _newest_window(
        uow,
        conversation_namespace(conversation_id),
        max_tokens=limits.max_tokens,
        max_messages=limits.max_messages,
        whole_turns=True,
        keep_one=True,
    )
    return history_messages(turns, window, None)


def read_context(
    uow: UnitOfWork, conversation_id: str, limits: Limits, estimator: Estimator
) -> list[Any]:
    """The summary, the pinned turns, then the newest messages, within ``limits``
    (the newest messages always: see :func:`read_context_parts`'s ``keep_one``)."""
    summary, messages = read_context_parts(uow, conversation_id, limits, estimator, keep_one=True)
    return messages if summary is None else [summary, *messages]


def read_context_parts(
    uow: UnitOfWork,
    conversation_id: str,
    limits: Limits,
    estimator: Estimator,
    style: str | None = None,
    *,
    keep_one: bool = False,
) -> tuple[Any | None, list[Any]]:
    """:func:`read_context` in two parts: the summary message (``None``: none), the rest.

    ``style`` (``"pydantic-ai"`` or ``"dict"``) forces the style of the summary
    and of turns without raw messages; ``None``: the style of the turns read.
    ``keep_one``: when no newest message fits beside the summary and the pinned
    turns, the shortest valid run of the newest messages (a call with its
    results) comes all the same, over the limits; without it, none comes.
    """
    namespace = conversation_namespace(conversation_id)
    head = head_from_entry(uow.entries.get_by_key(namespace, HEAD_KEY))
    max_tokens = limits.max_tokens
    max_messages = limits.max_messages
    with_summary = False
    if head.summary:
        cost = int(estimator.estimate(f"{SUMMARY_CONTEXT_PREFIX}{head.summary}"))
        fits = max_tokens is None or cost <= max_tokens
        if fits and (max_messages is None or max_messages >= 1):
            with_summary = True
            max_tokens = None if max_tokens is None else max_tokens - cost
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
    max_tokens = None if max_tokens is None else max_tokens - pinned_tokens
    max_messages = None if max_messages is None else max_messages - pinned_messages
    last_pinned = pinned[-1]["turn_id"] if pinned else -1
    recent, window = _newest_window(
        uow,
        namespace,
        max_tokens=max_tokens,
        max_messages=max_messages,
        whole_turns=False,
        after_turn_id=last_pinned,
        keep_one=keep_one,
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


def read_recent_messages(uow: UnitOfWork, conversation_id: str, count: int) -> list[Any]:
    """The newest ``count`` model messages at most, oldest first.

    An indexed ``ORDER BY key DESC LIMIT`` read of the newest turns: as many
    as hold ``count`` messages if each holds two (a prompt and an answer), so
    a chat is one statement reading half as many rows as ``count``; turns
    holding fewer messages than that make it read older turns, in batches
    sized from the message counts read so far (as the budgeted reads do).
    The window follows the rule of every window
    (:mod:`~firefly_orm.conversation._window`): it starts at a message a history
    may open with and never separates a tool call from its result, so it holds
    fewer than ``count`` messages when the ``count``-th newest cannot start
    one.  Turns stored without raw messages give a prompt and an answer
    message in the style of the others, as in :func:`read_context_parts`.
    """
    if count == 0:
        return []
    turns, window = _newest_window(
        uow,
        conversation_namespace(conversation_id),
        max_tokens=None,
        max_messages=count,
        whole_turns=False,
        first_batch=count // 2 + 1,
    )
    return history_messages(turns, window, message_style(turns[window.turn :]))


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
    first_batch: int | None = None,
    keep_one: bool = False,
) -> tuple[list[Content], ContextWindow]:
    """Read the newest turns, then older ones in batches, until the window fits inside them.

    Each batch after the first reads only turns older than those read
    (:func:`_older_reader`), as many as the stored estimates of the rows read
    so far say the window still needs (:func:`_next_batch`), so the rows
    fetched stay close to the rows the window holds.  The window comes from
    :func:`~firefly_orm.conversation._context.newest_whole_turns` when it
    answers (no turn in reach makes or answers a tool call, nor, for a window
    that may start inside a turn, may be opened inside), else from
    :func:`~firefly_orm.conversation._context.place_window`.  ``keep_one``:
    the window holds the newest messages even when none fits (see
    :func:`~firefly_orm.conversation._context.place_window`).
    """
    read_older = _older_reader(uow, namespace)
    batch = _first_batch(max_tokens, max_messages) if first_batch is None else first_batch
    rows: list[Any] = []  # newest first
    while True:
        got = read_older(rows, batch)
        rows.extend(got)
        fast = None
        if whole_turns and after_turn_id < 0:
            fast = newest_whole_turns(
                rows,
                namespace,
                max_tokens=max_tokens,
                max_messages=max_messages,
                keep_one=keep_one,
            )
        if fast is not None:
            turns: list[Content] = rows[::-1]
            window = fast
        else:
            turns = checked_turns(rows[::-1], namespace)
            if after_turn_id >= 0:
                turns = [c for c in turns if c["turn_id"] > after_turn_id]
            if not whole_turns:  # made of whole turns all the same where no turn splits
                fast = newest_whole_turns(
                    turns[::-1],
                    namespace,
                    max_tokens=max_tokens,
                    max_messages=max_messages,
                    inside_turns=True,
                    keep_one=keep_one,
                )
            window = fast or place_window(
                turns,
                max_tokens=max_tokens,
                max_messages=max_messages,
                whole_turns=whole_turns,
                keep_one=keep_one,
            )
        if batch is None or not window.reached_oldest or len(got) < batch or len(turns) < len(rows):
            if keep_one and window.turn >= len(turns) and turns:  # every turn read: keep one
                turns = checked_turns(turns, namespace)
                window = place_window(
                    turns,
                    max_tokens=max_tokens,
                    max_messages=max_messages,
                    whole_turns=whole_turns,
                    keep_one=True,
                    complete=True,
                )
            return turns, window
        batch = _next_batch(rows, max_tokens=max_tokens, max_messages=max_messages)


def _first_batch(max_tokens: int | None, max_messages: int | None) -> int | None:
    """How many of the newest turns a budgeted read reads first (``None``: every one).

    Every turn holds at least one message, so ``max_messages + 1`` turns are
    always enough to find where a window under ``max_messages`` starts.  A
    read with neither limit holds every turn: one statement reads them all,
    where batches would take a statement per batch.
    """
    if max_tokens is None and max_messages is None:
        return None
    first = 4 * FIRST_BATCH
    return first if max_messages is None else min(first, max_messages + 1)


def _next_batch(rows: list[Any], *, max_tokens: int | None, max_messages: int | None) -> int:
    """How many older turns to read next, the window holding every row in ``rows``.

    The room left under each limit divided by what an average row read so far
    used of it (their stored token estimates and message counts), a quarter
    more and the one turn that stops the window; at least 2, at most
    ``4 * len(rows)`` (the growth of the batches before the estimates were
    used, so a window never takes more statements than it did then).
    """
    needed = math.inf
    if max_tokens is not None:
        used = sum(_row_tokens(row) for row in rows)
        if used > 0:
            needed = min(needed, (max_tokens - used) * len(rows) / used)
    if max_messages is not None:
        counted = sum(turn_message_count(row) for row in rows)
        needed = min(needed, (max_messages - counted) * len(rows) / counted)
    most = 4 * len(rows)
    if needed == math.inf:
        return most
    return max(2, min(most, math.ceil(1.25 * max(needed, 0)) + 1))


def _row_tokens(row: Any) -> int:
    """A row's stored token estimate (rows here were read and checked by the window)."""
    return int(row["token_estimate"]) if isinstance(row, Mapping) else 0


#: ``read_older(rows, n)``: the next at most ``n`` turn contents older than ``rows``
#: (the turns read so far, newest first), newest first; ``n=None`` (every turn)
#: only as the first read.
OlderReader = Callable[[list[Any], int | None], list[Any]]


def _older_reader(uow: UnitOfWork, namespace: str) -> OlderReader:
    """How a budgeted read fetches older turns on this unit of work.

    A repository that reads a key range (the SQL stores'
    ``list_contents_before``) reads only the turns before the oldest one
    read; on any other, a longer newest-first read is sliced (the rows
    already read come again).
    """
    optional = optional_operations(uow.entries)
    before = optional.list_contents_before if optional.supports_list_contents_before else None

    def read_older(rows: list[Any], count: int | None) -> list[Any]:
        if not rows:
            return uow.entries.list_contents(
                namespace, key_prefix=TURN_KEY_PREFIX, limit=count, newest_first=True
            )
        if count is None:  # (a read of every turn is one batch: _newest_window)
            raise ValueError("only the first read of a window reads every turn")
        if before is None:
            more = uow.entries.list_contents(
                namespace, key_prefix=TURN_KEY_PREFIX, limit=len(rows) + count, newest_first=True
            )
            return list(more[len(rows) :])
        (oldest,) = checked_turns(rows[-1:], namespace)
        page = before(
            namespace,
            key_prefix=TURN_KEY_PREFIX,
            before_key=turn_key(int(oldest["turn_id"])),
            limit=count,
        )
        return list(page or ())  # supports_list_contents_before: a page, never None

    return read_older
