"""Pure window arithmetic over model messages: where a history may start and end.

A history handed to a model must never open with a tool result whose call was
cut off, nor leave a tool call separated from its result.  These functions
work on :class:`Slot` lists (one per model message, chronological) built from
:class:`~firefly_orm.conversation._messages.MessageInfo` and token estimates, so
they are the one place that rule lives; :mod:`firefly_orm.conversation._context`
uses them for history reads and assembled context.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["Slot", "closed_prefix", "window_start"]


class Slot(NamedTuple):
    """One model message as the window rules see it (a named tuple, cheap to build).

    Attributes:
        tokens: Its token estimate.
        opens: A window may start here.
        calls: Ids of the tool calls it makes.
        results: Ids of the tool calls it answers.
        messages: How many model messages it stands for (a whole turn may be
            one slot).
    """

    tokens: int
    opens: bool
    calls: tuple[str, ...] = ()
    results: tuple[str, ...] = ()
    messages: int = 1


def window_start(
    slots: Sequence[Slot],
    *,
    max_tokens: int | None = None,
    max_messages: int | None = None,
    floor: int = 0,
    keep_one: bool = False,
) -> int:
    """Start of the newest run of ``slots[floor:]`` that fits and is valid on its own.

    The run ends with the newest slot, holds at most ``max_messages`` slots whose
    tokens sum to at most ``max_tokens`` (``None``: no limit), starts at a slot
    that ``opens``, and every result in it answers a call in it.  It is the
    longest such run; ``len(slots)`` (an empty run) when none exists.

    ``keep_one``: when no run fits, the shortest valid run instead (the newest
    slot that opens and whose run answers every result in it), over the
    limits; ``len(slots)`` only when no valid run exists at all.
    """
    n = len(slots)
    cut = n
    used = counted = 0
    while cut > floor:
        slot = slots[cut - 1]
        if max_tokens is not None and used + slot.tokens > max_tokens:
            break
        if max_messages is not None and counted + slot.messages > max_messages:
            break
        used += slot.tokens
        counted += slot.messages
        cut -= 1
    # need[j]: the earliest position the window may start at for slot j's results
    # to have their calls inside it (-1: a call that is missing altogether).
    call_at: dict[str, int] = {}
    need = [n] * n
    for j, slot in enumerate(slots):
        for call in slot.calls:  # first: a whole-turn slot answers its own calls
            call_at[call] = j
        for result in slot.results:
            need[j] = min(need[j], call_at.get(result, -1))
    lowest = n
    best = n
    for start in range(n - 1, floor - 1, -1):
        if start < cut and (best < n or not keep_one):
            break
        lowest = min(lowest, need[start])
        if slots[start].opens and lowest >= start:
            best = start
            if start < cut:  # keep_one: the newest valid start, over the limits
                break
    return best


def closed_prefix(slots: Sequence[Slot]) -> int:
    """The longest prefix length in which every tool call is answered inside it.

    Used for a run that will be followed by a gap (pinned turns before the
    recent window): a call whose result would fall in the gap is cut, with
    everything after it.
    """
    answered_at: dict[str, int] = {}
    for j, slot in enumerate(slots):
        for result in slot.results:
            answered_at.setdefault(result, j)
    reach = -1  # the furthest position a call so far needs
    best = 0
    for i, slot in enumerate(slots):
        for call in slot.calls:
            reach = max(reach, answered_at.get(call, len(slots)))
        if reach <= i:
            best = i + 1
    return best
