"""Pure planning of conversation memory: what adding a turn evicts, what history fits.

No I/O here: :func:`plan_append` takes the head, the new turn and a way to
read the oldest turns, and returns an :class:`AppendPlan` that the operations
(:mod:`firefly_orm.conversation._ops`) apply in one unit of work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from firefly_orm._layout import token_caps
from firefly_orm.conversation._model import (
    SUMMARY_TURN_ID,
    SUMMARY_TURN_PROMPT,
    ConversationTurn,
)

__all__ = [
    "AppendPlan",
    "HeadState",
    "Limits",
    "OldestTurns",
    "fitting_count",
    "history_suffix",
    "plan_append",
    "summary_input",
]

#: How many of the oldest turns eviction reads first (then 4x more each time).
FIRST_BATCH = 8


@dataclass(frozen=True)
class HeadState:
    """What a conversation's head says (``version == 0``: no head stored yet).

    ``total_messages`` is ``None`` on heads written before message counts were
    kept (the operations recount it from the turns when a limit needs it).
    """

    next_turn_id: int = 0
    total_tokens: int = 0
    turn_count: int = 0
    summary: str | None = None
    version: int = 0
    total_messages: int | None = None


@dataclass(frozen=True)
class Limits:
    """What a conversation is held to (see :class:`~firefly_orm.ConversationMemory`).

    Attributes:
        max_tokens: Token budget (``None``: no token limit).
        summarize_threshold: Token eviction starts above this total and goes down
            to it (``None`` or ``0``: no threshold, ``max_tokens`` is both; see
            :func:`~firefly_orm._layout.token_caps`).
        max_messages: At most this many model messages (``None``: no limit).
        pin_count: The oldest turns that are never evicted.
        recent_count: When eviction starts, every unpinned turn but the newest
            ``recent_count`` is evicted at once (``0``: only as many as needed).
    """

    max_tokens: int | None
    summarize_threshold: int | None = None
    max_messages: int | None = None
    pin_count: int = 0
    recent_count: int = 0


@dataclass(frozen=True)
class AppendPlan:
    """What adding one turn does (the result of :func:`plan_append`).

    Attributes:
        turn: The turn to insert, with its ``turn_id`` assigned.
        evicted_turn_ids: Ids of the stored turns to evict, oldest first.
        evicted_turns: Those turns.
        summarize: True when a summary must be made of the evicted turns.
        total_tokens: The conversation's token total after the plan.
        turn_count: Its number of turns after the plan.
        next_turn_id: The next turn id after the plan.
        expected_version: The head version the plan was made on.
        total_messages: Its number of model messages after the plan.
        reason: What started the eviction (``"max_tokens"``,
            ``"summarize_threshold"`` or ``"max_messages"``), ``None`` when
            nothing was evicted.
    """

    turn: ConversationTurn
    evicted_turn_ids: tuple[int, ...]
    evicted_turns: tuple[ConversationTurn, ...]
    summarize: bool
    total_tokens: int
    turn_count: int
    next_turn_id: int
    expected_version: int
    total_messages: int = 0
    reason: str | None = None


#: The stored turns oldest first: a sequence, or ``n -> the n oldest turns``.
OldestTurns = Sequence[ConversationTurn] | Callable[[int], Sequence[ConversationTurn]]


def plan_append(
    head: HeadState,
    new_turn: ConversationTurn,
    oldest_turns: OldestTurns,
    max_tokens: int | Limits | None,
    summarize_threshold: int | None = None,
    *,
    has_summarizer: bool = False,
) -> AppendPlan:
    """Plan adding ``new_turn`` to a conversation (pure: no I/O of its own).

    The new turn gets ``turn_id = head.next_turn_id``.  Eviction starts when,
    with the new turn, the token total exceeds the trigger of
    :func:`~firefly_orm._layout.token_caps` (``summarize_threshold`` when set,
    whatever ``max_tokens`` is, else ``max_tokens``), or the message count
    exceeds ``max_messages``.  It then removes the oldest unpinned turns (all
    but the newest ``recent_count`` unpinned ones at once when ``recent_count``
    is set), and goes on while the total exceeds the target of
    :func:`~firefly_orm._layout.token_caps` (the lower of the threshold and
    ``max_tokens``) or the count ``max_messages``.  The first ``pin_count``
    stored turns and the new turn are never evicted.

    Args:
        head: The conversation's head before the turn.
        new_turn: The turn to add (its ``turn_id`` is replaced).
        oldest_turns: The stored turns oldest first, either as a sequence or as a
            callable ``n -> the n oldest turns (fewer if there are fewer)``; the
            callable is asked only when eviction is needed, for growing ``n``.
        max_tokens: The token budget (``None``: none), or every limit as a
            :class:`Limits`.
        summarize_threshold: The token threshold (ignored when ``max_tokens``
            is a :class:`Limits`).
        has_summarizer: Whether evicted turns are to be summarised.
    """
    limits = (
        max_tokens
        if isinstance(max_tokens, Limits)
        else Limits(max_tokens=max_tokens, summarize_threshold=summarize_threshold)
    )
    turn = new_turn.model_copy(update={"turn_id": head.next_turn_id})
    total = head.total_tokens + turn.token_estimate
    messages = (head.total_messages or 0) + turn.message_count
    count = head.turn_count + 1

    trigger, target = token_caps(limits.max_tokens, limits.summarize_threshold)

    def over() -> str | None:
        if total > target:
            return "max_tokens"
        if limits.max_messages is not None and messages > limits.max_messages:
            return "max_messages"
        return None

    reason: str | None = None
    if total > trigger:
        below_budget = limits.max_tokens is None or trigger < limits.max_tokens
        reason = "summarize_threshold" if below_budget else "max_tokens"
    if reason is None and limits.max_messages is not None and messages > limits.max_messages:
        reason = "max_messages"
    evicted: list[ConversationTurn] = []
    if reason is not None:
        pinned = min(limits.pin_count, head.turn_count)
        evictable = head.turn_count - pinned
        # All unpinned turns but the newest recent_count (the new turn among them).
        batch_out = 0
        if limits.recent_count:
            batch_out = min(evictable, evictable + 1 - limits.recent_count)
        fetch = _fetcher(oldest_turns)
        wanted = max(FIRST_BATCH, pinned + max(batch_out, 1))
        batch = list(fetch(wanted))
        while len(evicted) < evictable and (len(evicted) < batch_out or over() is not None):
            index = pinned + len(evicted)
            if index >= len(batch):
                if len(batch) < wanted:
                    break  # the store holds fewer turns than the head says
                wanted *= 4
                batch = list(fetch(wanted))
                if index >= len(batch):
                    break
            oldest = batch[index]
            evicted.append(oldest)
            total -= oldest.token_estimate
            messages -= oldest.message_count
            count -= 1
    return AppendPlan(
        turn=turn,
        evicted_turn_ids=tuple(t.turn_id for t in evicted),
        evicted_turns=tuple(evicted),
        summarize=bool(evicted) and has_summarizer,
        total_tokens=max(total, 0),
        turn_count=count,
        next_turn_id=turn.turn_id + 1,
        expected_version=head.version,
        total_messages=max(messages, 0),
        reason=reason if evicted else None,
    )


def _fetcher(oldest_turns: OldestTurns) -> Callable[[int], Sequence[ConversationTurn]]:
    if callable(oldest_turns):
        return oldest_turns
    stored = list(oldest_turns)

    def fetch(n: int) -> Sequence[ConversationTurn]:
        return stored[:n]

    return fetch


def summary_input(
    previous_summary: str | None, evicted: Iterable[ConversationTurn]
) -> list[ConversationTurn]:
    """The turns handed to the summarizer.

    When there is a previous summary it comes first, as a synthetic turn with
    ``turn_id=SUMMARY_TURN_ID`` (-1), ``user_prompt=SUMMARY_TURN_PROMPT`` and the
    previous summary as ``assistant_response``, so the new summary covers it too.
    """
    turns: list[ConversationTurn] = []
    if previous_summary:
        turns.append(
            ConversationTurn(
                turn_id=SUMMARY_TURN_ID,
                user_prompt=SUMMARY_TURN_PROMPT,
                assistant_response=previous_summary,
            )
        )
    turns.extend(evicted)
    return turns


def history_suffix(
    turns: Sequence[ConversationTurn], max_tokens: int | None
) -> list[ConversationTurn]:
    """The newest contiguous run of ``turns`` (chronological) fitting ``max_tokens``.

    Walks from the newest turn back and stops at the first that does not fit.
    At least the newest turn is kept: an oversize newest turn gives ``[newest]``
    (the module this is modelled on gave ``[]``).  ``max_tokens=None``: every turn.
    """
    if max_tokens is None:
        return list(turns)
    count, _ = fitting_count([t.token_estimate for t in reversed(turns)], max_tokens)
    count = max(count, min(1, len(turns)))
    return list(turns[len(turns) - count :])


def fitting_count(estimates_newest_first: Sequence[int], max_tokens: int) -> tuple[int, bool]:
    """How many of the newest turns fit ``max_tokens``; and whether a turn did not fit."""
    running = 0
    for index, estimate in enumerate(estimates_newest_first):
        if running + estimate > max_tokens:
            return index, True
        running += estimate
    return len(estimates_newest_first), False
