"""Pure planning of conversation memory: what adding a turn evicts, what history fits.

No I/O here: :func:`plan_append` takes the head, the new turn and a way to
read the oldest turns, and returns an :class:`AppendPlan` that the operations
(:mod:`firefly_orm.conversation.ops`) apply in one unit of work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from firefly_orm.conversation.model import (
    SUMMARY_TURN_ID,
    SUMMARY_TURN_PROMPT,
    ConversationTurn,
)

__all__ = [
    "AppendPlan",
    "HeadState",
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
    """What a conversation's head says (``version == 0``: no head stored yet)."""

    next_turn_id: int = 0
    total_tokens: int = 0
    turn_count: int = 0
    summary: str | None = None
    version: int = 0


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
    """

    turn: ConversationTurn
    evicted_turn_ids: tuple[int, ...]
    evicted_turns: tuple[ConversationTurn, ...]
    summarize: bool
    total_tokens: int
    turn_count: int
    next_turn_id: int
    expected_version: int


#: The stored turns oldest first: a sequence, or ``n -> the n oldest turns``.
OldestTurns = Sequence[ConversationTurn] | Callable[[int], Sequence[ConversationTurn]]


def plan_append(
    head: HeadState,
    new_turn: ConversationTurn,
    oldest_turns: OldestTurns,
    max_tokens: int,
    summarize_threshold: int,
    *,
    has_summarizer: bool = False,
) -> AppendPlan:
    """Plan adding ``new_turn`` to a conversation (pure: no I/O of its own).

    The new turn gets ``turn_id = head.next_turn_id``.  After adding it, if the
    total exceeds ``summarize_threshold`` AND ``max_tokens``, the oldest stored
    turns are evicted (FIFO) while the total exceeds ``max_tokens`` and more than
    one turn remains; the new turn is never evicted.

    Args:
        head: The conversation's head before the turn.
        new_turn: The turn to add (its ``turn_id`` is replaced).
        oldest_turns: The stored turns oldest first, either as a sequence or as a
            callable ``n -> the n oldest turns (fewer if there are fewer)``; the
            callable is asked only when eviction is needed, for growing ``n``.
        max_tokens: The budget.
        summarize_threshold: Eviction happens only above this total.
        has_summarizer: Whether evicted turns are to be summarised.
    """
    turn = new_turn.model_copy(update={"turn_id": head.next_turn_id})
    total = head.total_tokens + turn.token_estimate
    count = head.turn_count + 1
    evicted: list[ConversationTurn] = []
    if total > summarize_threshold and total > max_tokens:
        fetch: Callable[[int], Sequence[ConversationTurn]]
        if callable(oldest_turns):
            fetch = oldest_turns
        else:
            stored = list(oldest_turns)

            def fetch(n: int) -> Sequence[ConversationTurn]:
                return stored[:n]

        wanted = FIRST_BATCH
        batch = list(fetch(wanted))
        index = 0
        while total > max_tokens and count > 1:
            if index >= len(batch):
                if len(batch) < wanted:
                    break  # the store holds fewer turns than the head says
                wanted *= 4
                batch = list(fetch(wanted))
                if index >= len(batch):
                    break
            oldest = batch[index]
            index += 1
            evicted.append(oldest)
            total -= oldest.token_estimate
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
    )


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


def history_suffix(turns: Sequence[ConversationTurn], max_tokens: int) -> list[ConversationTurn]:
    """The newest contiguous run of ``turns`` (chronological) fitting ``max_tokens``.

    Walks from the newest turn back and stops at the first that does not fit, so
    an oversize newest turn gives ``[]`` (as the module this is modelled on does).
    """
    count, _ = fitting_count([t.token_estimate for t in reversed(turns)], max_tokens)
    return list(turns[len(turns) - count :]) if count else []


def fitting_count(estimates_newest_first: Sequence[int], max_tokens: int) -> tuple[int, bool]:
    """How many of the newest turns fit ``max_tokens``; and whether a turn did not fit."""
    running = 0
    for index, estimate in enumerate(estimates_newest_first):
        if running + estimate > max_tokens:
            return index, True
        running += estimate
    return len(estimates_newest_first), False
