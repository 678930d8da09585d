"""Choosing what of a conversation a model gets, from stored turn contents (no I/O).

Two reads use this:

* the *history* (:meth:`~firefly_orm.ConversationMemory.get_message_history`):
  the raw messages of the newest whole turns fitting the limits, as before;
* the *context* (:meth:`~firefly_orm.ConversationMemory.get_context`): the
  rolling summary first, then the pinned turns, then the newest messages, all
  within the limits; it may start inside a turn, at a message a history may
  open with, and turns stored without raw messages become a prompt and an
  answer message.

Both cut through :func:`~firefly_orm.conversation._window.window_start`, so no
window opens with a tool result whose call was cut or splits a call from its
result.  Token estimates are the stored ones: per message when the row's
``message_tokens`` holds them, else the turn's estimate on its first message
(such a turn is cut only at its start; rows are written with ``[]`` where no
window can start inside the turn, see :mod:`firefly_orm.conversation._rows`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from firefly_orm.conversation._codec import (
    decode_raw_messages,
    decode_turns_messages,
    pydantic_ai_messages,
)
from firefly_orm.conversation._messages import MESSAGES_PER_PLAIN_TURN, inspect_encoded
from firefly_orm.conversation._rows import turn_message_count
from firefly_orm.conversation._window import Slot, closed_prefix, window_start
from firefly_orm.errors import StoreCorruptedError

__all__ = [
    "SUMMARY_CONTEXT_PREFIX",
    "ContextWindow",
    "checked_turns",
    "history_messages",
    "message_style",
    "newest_whole_turns",
    "pinned_part",
    "place_window",
    "slots_of",
    "summary_message",
    "turn_messages",
]

#: What precedes the rolling summary in the message that carries it.
SUMMARY_CONTEXT_PREFIX = "Summary of the earlier conversation:\n"

#: A turn row's content (a mapping from the store).
Content = Mapping[str, Any]


def slots_of(content: Content, *, whole_turn: bool) -> list[Slot]:
    """The :class:`Slot` of each model message of a stored turn.

    ``whole_turn``: only the turn's first message may open a window (the
    history read keeps whole turns).
    """
    raw = content.get("raw_messages")
    estimate = int(content.get("token_estimate") or 0)
    if not raw:
        if whole_turn:
            return [Slot(estimate, True, messages=MESSAGES_PER_PLAIN_TURN)]
        return [Slot(estimate, True)] + [Slot(0, False)] * (MESSAGES_PER_PLAIN_TURN - 1)
    summary = content.get("window")
    if whole_turn and "message_tokens" in content:  # written by this release on: no inspection
        if not isinstance(summary, Mapping):  # left out: opens, no tool calls
            summary = {"opens": True}
        return [
            Slot(
                estimate,
                bool(summary.get("opens")),
                tuple(summary.get("calls") or ()),
                tuple(summary.get("results") or ()),
                messages=turn_message_count(content),
            )
        ]
    infos = inspect_encoded(raw, with_text=False)
    if not infos:
        return [Slot(estimate, True)] + [Slot(0, False)] * (MESSAGES_PER_PLAIN_TURN - 1)
    stored = content.get("message_tokens")
    split = (
        isinstance(stored, list)
        and len(stored) == len(infos)
        and all(isinstance(t, int) and not isinstance(t, bool) for t in stored)
    )
    costs = list(stored) if split and isinstance(stored, list) else [estimate] + [0] * len(infos)
    return [
        Slot(
            costs[i],
            info.opens and (i == 0 or (split and not whole_turn)),
            info.calls,
            info.results,
        )
        for i, info in enumerate(infos)
    ]


@dataclass(frozen=True)
class ContextWindow:
    """Where a window over some turns starts.

    Attributes:
        turn: Index of the first (partly) included turn; ``len(turns)``: none.
        offset: Messages of that turn left out.
        reached_oldest: Older turns could change the window: every message of
            the turns given fits within the limits with room to spare, so the
            window would go on into older turns, or start at an older message
            when none given may start it (the caller then reads more turns and
            asks again).
    """

    turn: int
    offset: int
    reached_oldest: bool


def place_window(
    turns: Sequence[Content],
    *,
    max_tokens: int | None,
    max_messages: int | None,
    whole_turns: bool,
    keep_one: bool = False,
    complete: bool = False,
) -> ContextWindow:
    """The newest valid window over ``turns`` (chronological) within the limits.

    The general rule, over every message's :class:`Slot`; a history read tries
    :func:`newest_whole_turns` first.

    ``keep_one``: when nothing fits, never an empty window but the newest
    messages, over the limits: with ``whole_turns``, the newest messages of the
    newest turn that fit (or, when none does, the shortest run of its newest
    messages a window may hold: a call with its results), else its whole turn;
    without, the shortest valid run of the newest messages
    (:func:`~firefly_orm.conversation._window.window_start`'s ``keep_one``).
    It applies once older turns cannot change the window: when the turns given
    are over the limits, or are every turn there is (``complete``).
    """
    slots: list[Slot] = []
    owner: list[tuple[int, int]] = []
    for turn_index, content in enumerate(turns):
        for message_index, slot in enumerate(slots_of(content, whole_turn=whole_turns)):
            slots.append(slot)
            owner.append((turn_index, message_index))
    start = window_start(slots, max_tokens=max_tokens, max_messages=max_messages)
    # Older turns can change the window only if every message here fits with
    # room to spare: then the window may reach further back, and start at an
    # older message (when none here may start it, or the oldest here may not).
    room = (max_tokens is None or sum(s.tokens for s in slots) < max_tokens) and (
        max_messages is None or sum(s.messages for s in slots) < max_messages
    )
    if start >= len(slots) and keep_one and slots and (complete or not room):
        return _kept_one(turns, slots, owner, max_tokens, max_messages, whole_turns)
    if start >= len(slots):
        return ContextWindow(len(turns), 0, room and bool(slots))
    turn_index, offset = owner[start]
    return ContextWindow(turn_index, offset, room)


def _kept_one(
    turns: Sequence[Content],
    slots: Sequence[Slot],
    owner: Sequence[tuple[int, int]],
    max_tokens: int | None,
    max_messages: int | None,
    whole_turns: bool,
) -> ContextWindow:
    """:func:`place_window`'s window when nothing fits and one message must be kept.

    ``reached_oldest`` when no valid run exists in ``turns`` (an older turn may
    open one).
    """
    if whole_turns:  # first the newest messages of the newest turn, within the limits
        inside = place_window(
            turns[-1:], max_tokens=max_tokens, max_messages=max_messages, whole_turns=False
        )
        if inside.turn == 0:
            return ContextWindow(len(turns) - 1, inside.offset, False)
        inside = place_window(
            turns[-1:], max_tokens=0, max_messages=0, whole_turns=False, keep_one=True
        )
        if inside.turn == 0:
            return ContextWindow(len(turns) - 1, inside.offset, False)
    start = window_start(slots, max_tokens=0, max_messages=0, keep_one=True)
    if start >= len(slots):
        return ContextWindow(len(turns), 0, True)
    turn_index, offset = owner[start]
    return ContextWindow(turn_index, offset, False)


def newest_whole_turns(
    rows: Sequence[Any],
    namespace: str,
    *,
    max_tokens: int | None,
    max_messages: int | None,
    inside_turns: bool = False,
    keep_one: bool = False,
) -> ContextWindow | None:
    """The fast path of the window rule over turn rows read newest first.

    Returns the window :func:`place_window` gives over ``rows[::-1]``, made
    of the newest whole turns within the limits.  It needs only what each row
    recorded at write time (its estimate, its message count, whether its first
    message opens; the messages of a row written by an earlier release are
    inspected for them), so it serves windows in which no turn makes or
    answers a tool call; ``None`` when one does (then :func:`place_window`
    decides, over :func:`checked_turns`).  Message counts are read only under
    ``max_messages``.

    ``inside_turns``: for a window that may start inside a turn (last-N and
    context reads, ``place_window(whole_turns=False)``).  It too is made of
    whole turns when in every row in reach (in the window, or the one before
    it) only the first message may open a history and the whole estimate
    lies on it, as this release records it; ``None`` when a row in reach is of
    another kind.

    ``keep_one``: ``None`` when no whole turn fits (:func:`place_window` then
    keeps the newest messages).

    Raises:
        StoreCorruptedError: A row read has no integer ``token_estimate`` (the
            only field this read needs of every row).
    """
    token_room = math.inf if max_tokens is None else max_tokens
    message_room = math.inf if max_messages is None else max_messages
    used_tokens = used_messages = 0
    count = 0  # the window's part of the newest turns within the limits
    for fitting, content in enumerate(rows):
        try:
            used_tokens += int(content["token_estimate"])
        except (KeyError, TypeError, ValueError) as exc:
            raise _unreadable(content, namespace, exc) from exc
        raw = content.get("raw_messages")
        if inside_turns and raw and not _opens_first_only(content, raw):
            return None
        opening = True
        inspected = 0  # the message count of a row whose messages were inspected
        unusual = "message_tokens" not in content or "window" in content
        if unusual and raw:
            if "message_tokens" in content:
                summary = content.get("window")
                if summary is not None:
                    if (
                        not isinstance(summary, Mapping)
                        or summary.get("calls")
                        or summary.get("results")
                    ):
                        return None
                    opening = bool(summary.get("opens"))
            else:  # an earlier release wrote it: inspect its messages
                infos = inspect_encoded(raw, with_text=False)
                if any(info.calls or info.results for info in infos):
                    return None
                opening = not infos or infos[0].opens
                inspected = len(infos) or MESSAGES_PER_PLAIN_TURN
        if max_messages is not None:
            used_messages += inspected or turn_message_count(content)
        if used_tokens > token_room or used_messages > message_room:
            if keep_one and count == 0:
                return None
            for older in rows[fitting + 1 :]:  # only checked
                _estimate(older, namespace)
            return ContextWindow(len(rows) - count, 0, False)
        if opening:
            count = fitting + 1
    # Every row fits: older ones may widen the window, or give it an opening turn.
    room = bool(rows) and used_tokens < token_room and used_messages < message_room
    return ContextWindow(len(rows) - count, 0, room)


def _opens_first_only(content: Content, raw: Any) -> bool:
    """Whether, as this release records it (``message_tokens == []``, no ``window``
    summary), only a turn row's first message may open a history and the turn
    makes and answers no tool call."""
    messages = raw.get("messages") if isinstance(raw, Mapping) else None
    return (
        content.get("message_tokens") == []
        and "window" not in content
        and isinstance(messages, list)
        and bool(messages)
    )


def _estimate(content: Any, namespace: str) -> int:
    """A turn row's token estimate (the field every read needs)."""
    try:
        return int(content["token_estimate"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _unreadable(content, namespace, exc) from exc


def checked_turns(contents: list[Any], namespace: str) -> list[Content]:
    """``contents``, once each is checked to be a turn row's content.

    Raises:
        StoreCorruptedError: One is not a mapping with an integer ``turn_id``
            and ``token_estimate``.
    """
    for content in contents:
        if not isinstance(content, Mapping):
            raise _unreadable(content, namespace)
        try:
            int(content["token_estimate"])
            int(content["turn_id"])
        except (KeyError, TypeError, ValueError) as exc:
            raise _unreadable(content, namespace, exc) from exc
    return contents


def _unreadable(content: Any, namespace: str, exc: Exception | None = None) -> StoreCorruptedError:
    """The error for a turn row whose ``content`` cannot be read (``exc`` says why)."""
    if exc is None or not isinstance(content, Mapping):
        why = f"a turn row holds {type(content).__name__}, not an object"
    else:
        why = str(exc)
    return StoreCorruptedError(f"unreadable turn in {namespace!r}: {why}")


def history_messages(
    turns: Sequence[Content], window: ContextWindow, style: str | None
) -> list[Any]:
    """The messages of ``turns`` from ``window`` on (decoded), oldest first.

    ``style`` (``"pydantic-ai"`` or ``"dict"``): turns without raw messages give
    a prompt and an answer message in that style; ``None``: they give nothing
    (as the history read always did).  The raw messages of consecutive turns
    are decoded together (:func:`~firefly_orm.conversation._codec.decode_turns_messages`).
    """
    chosen = turns[window.turn :]
    messages: list[Any] = []
    if window.offset and chosen:
        messages.extend(turn_messages(chosen[0], style)[window.offset :])
        chosen = chosen[1:]
    if style is None:  # the history read: the raw messages of whole turns
        messages.extend(decode_turns_messages(c.get("raw_messages") for c in chosen))
        return messages
    stored: list[Any] = []  # the raw messages of the turns since the last plain one
    for content in chosen:
        raw = content.get("raw_messages")
        if raw:
            stored.append(raw)
            continue
        messages.extend(decode_turns_messages(stored))
        stored = []
        messages.extend(turn_messages(content, style))
    messages.extend(decode_turns_messages(stored))
    return messages


def pinned_part(
    turns: Sequence[Content], *, max_tokens: int | None, max_messages: int | None
) -> tuple[int, int, int]:
    """How many pinned turns fit (whole, every tool call answered): count, tokens, messages."""
    used_tokens = used_messages = 0
    kept: list[Slot] = []
    bounds: list[int] = []
    for content in turns:
        slots = slots_of(content, whole_turn=True)
        cost = sum(s.tokens for s in slots)
        n_messages = sum(s.messages for s in slots)
        if (max_tokens is not None and used_tokens + cost > max_tokens) or (
            max_messages is not None and used_messages + n_messages > max_messages
        ):
            break
        used_tokens += cost
        used_messages += n_messages
        kept.extend(slots)
        bounds.append(len(kept))
    closed = closed_prefix(kept)
    count = sum(1 for bound in bounds if bound <= closed)
    used = kept[: bounds[count - 1]] if count else []
    return count, sum(s.tokens for s in used), sum(s.messages for s in used)


def turn_messages(content: Content, style: str | None) -> list[Any]:
    """A stored turn's messages: its raw messages, else (``style`` given) prompt and answer."""
    raw = content.get("raw_messages")
    if raw:
        return decode_raw_messages(raw)
    if style is None:
        return []
    prompt = str(content.get("user_prompt", ""))
    answer = str(content.get("assistant_response", ""))
    if style == "pydantic-ai":
        messages = pydantic_ai_messages()
        return [
            messages.ModelRequest(parts=[messages.UserPromptPart(content=prompt)]),
            messages.ModelResponse(parts=[messages.TextPart(content=answer)]),
        ]
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]


def summary_message(summary: str, style: str) -> Any:
    """The message carrying the rolling summary, in the window's message style."""
    text = f"{SUMMARY_CONTEXT_PREFIX}{summary}"
    if style == "pydantic-ai":
        messages = pydantic_ai_messages()
        return messages.ModelRequest(parts=[messages.SystemPromptPart(content=text)])
    return {"role": "system", "content": text}


def message_style(turns: Sequence[Content]) -> str:
    """``"pydantic-ai"`` when some turn holds pydantic-ai messages (and it is installed)."""
    for content in turns:
        raw = content.get("raw_messages")
        pydantic = isinstance(raw, Mapping) and raw.get("format") == "pydantic-ai"
        if pydantic and pydantic_ai_messages() is not None:
            return "pydantic-ai"
    return "dict"
