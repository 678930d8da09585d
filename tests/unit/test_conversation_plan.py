"""The pure planning functions of conversation memory, on plain lists."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firefly_orm._layout import token_caps
from firefly_orm.conversation import (
    SUMMARY_TURN_ID,
    SUMMARY_TURN_PROMPT,
    AppendPlan,
    ConversationTurn,
    HeadState,
    history_suffix,
    plan_append,
    summary_input,
)
from firefly_orm.conversation._append import no_eviction_needed
from firefly_orm.conversation._plan import Limits


def turn(turn_id: int, tokens: int) -> ConversationTurn:
    return ConversationTurn(turn_id=turn_id, user_prompt=f"p{turn_id}", token_estimate=tokens)


def stored(*tokens: int, first_id: int = 0) -> list[ConversationTurn]:
    return [turn(first_id + i, t) for i, t in enumerate(tokens)]


def head_for(
    turns: list[ConversationTurn], *, version: int = 3, summary: str | None = None
) -> HeadState:
    return HeadState(
        next_turn_id=(turns[-1].turn_id + 1) if turns else 0,
        total_tokens=sum(t.token_estimate for t in turns),
        turn_count=len(turns),
        summary=summary,
        version=version,
    )


def test_no_eviction_under_budget() -> None:
    existing = stored(10, 10)
    plan = plan_append(head_for(existing), turn(99, 10), existing, 40, 0)
    assert plan.turn.turn_id == 2  # from the head, not from the given turn
    assert plan.evicted_turn_ids == ()
    assert plan.total_tokens == 30
    assert plan.turn_count == 3
    assert plan.next_turn_id == 3
    assert plan.expected_version == 3
    assert not plan.summarize


def test_evicts_oldest_until_within_budget() -> None:
    existing = stored(10, 10, 10, first_id=5)
    plan = plan_append(head_for(existing), turn(0, 15), existing, 30, 0, has_summarizer=True)
    assert plan.turn.turn_id == 8
    assert plan.evicted_turn_ids == (5, 6)
    assert [t.turn_id for t in plan.evicted_turns] == [5, 6]
    assert plan.total_tokens == 25
    assert plan.turn_count == 2
    assert plan.summarize


def test_without_summarizer_it_still_evicts_but_does_not_summarize() -> None:
    existing = stored(10, 10, 10)
    plan = plan_append(head_for(existing), turn(0, 10), existing, 20, 0)
    assert plan.evicted_turn_ids == (0, 1)
    assert not plan.summarize


def test_threshold_below_max_tokens_evicts_down_to_the_threshold() -> None:
    """The model's rule (issue 33): above the threshold the oldest turns go, down to
    it, whatever max_tokens is."""
    existing = stored(10, 10)
    plan = plan_append(head_for(existing), turn(0, 10), existing, 30, 15)
    assert plan.evicted_turn_ids == (0, 1)  # 30 > 15: down to 10 (the new turn stays)
    assert plan.total_tokens == 10
    assert plan.reason == "summarize_threshold"
    plan = plan_append(head_for(existing), turn(0, 10), existing, 30, 25)
    assert plan.evicted_turn_ids == (0,)  # 30 > 25: down to 20
    assert plan.total_tokens == 20
    plan = plan_append(head_for(existing), turn(0, 5), existing, 30, 25)
    assert plan.evicted_turn_ids == ()  # 25 is not > 25
    assert plan.reason is None


def test_no_threshold_evicts_at_max_tokens() -> None:
    for threshold in (None, 0):
        existing = stored(10, 10)
        plan = plan_append(head_for(existing), turn(0, 10), existing, 30, threshold)
        assert plan.evicted_turn_ids == ()  # 30 is not > 30
        existing = stored(10, 10, 10)
        plan = plan_append(head_for(existing), turn(0, 1), existing, 30, threshold)
        assert plan.evicted_turn_ids == (0,)
        assert plan.total_tokens == 21
        assert plan.reason == "max_tokens"


def test_no_token_limit_evicts_only_by_threshold_or_messages() -> None:
    existing = stored(10**6, 10**6)
    plan = plan_append(head_for(existing), turn(0, 10**6), existing, None, None)
    assert plan.evicted_turn_ids == ()
    plan = plan_append(head_for(existing), turn(0, 10), existing, None, 15)
    assert plan.evicted_turn_ids == (0, 1)
    assert plan.reason == "summarize_threshold"
    limits = Limits(max_tokens=None, max_messages=4)
    head = HeadState(next_turn_id=2, total_tokens=2 * 10**6, turn_count=2, total_messages=4)
    plan = plan_append(head, turn(0, 10**6), existing, limits)
    assert plan.evicted_turn_ids == (0,)  # 6 messages > 4
    assert plan.reason == "max_messages"


def test_threshold_above_max_tokens_lets_it_grow_then_trims_to_max_tokens() -> None:
    existing = stored(10, 10, 10, 10)
    plan = plan_append(head_for(existing), turn(0, 10), existing, 20, 50)
    assert plan.evicted_turn_ids == ()  # 50 is not > 50
    existing = stored(10, 10, 10, 10, 10)
    plan = plan_append(head_for(existing), turn(0, 10), existing, 20, 50)
    assert plan.evicted_turn_ids == (0, 1, 2, 3)
    assert plan.total_tokens == 20


def test_newest_turn_is_never_evicted_even_when_oversize() -> None:
    existing = stored(5, 5)
    plan = plan_append(head_for(existing), turn(0, 100), existing, 20, 0)
    assert plan.evicted_turn_ids == (0, 1)
    assert plan.turn_count == 1
    assert plan.total_tokens == 100


def test_first_turn_of_a_new_conversation() -> None:
    plan = plan_append(HeadState(), turn(7, 50), [], 10, 0, has_summarizer=True)
    assert plan.turn.turn_id == 0
    assert plan.evicted_turn_ids == ()
    assert plan.expected_version == 0
    assert plan.total_tokens == 50
    assert not plan.summarize


def test_provider_is_only_asked_when_eviction_is_needed_and_in_batches() -> None:
    asked: list[int] = []
    existing = stored(*([1] * 100))

    def provider(n: int) -> list[ConversationTurn]:
        asked.append(n)
        return existing[:n]

    plan = plan_append(head_for(existing), turn(0, 1), provider, 200, 0)
    assert asked == []
    assert plan.evicted_turn_ids == ()

    plan = plan_append(head_for(existing), turn(0, 3), provider, 100, 0)
    assert plan.evicted_turn_ids == (0, 1, 2)
    assert len(asked) == 1 and asked[0] < 100  # a small first batch, not the whole list

    asked.clear()
    plan = plan_append(head_for(existing), turn(0, 60), provider, 100, 0)
    assert plan.evicted_turn_ids == tuple(range(60))
    assert asked == sorted(asked) and len(asked) >= 2  # growing batches


def test_provider_shorter_than_head_claims_stops_cleanly() -> None:
    existing = stored(10)
    head = HeadState(next_turn_id=5, total_tokens=100, turn_count=5, version=2)
    plan = plan_append(head, turn(0, 10), existing, 20, 0)
    assert plan.evicted_turn_ids == (0,)
    assert plan.turn.turn_id == 5


def test_plan_is_frozen_and_does_not_mutate_inputs() -> None:
    new = turn(42, 10)
    existing = stored(10, 10)
    plan = plan_append(head_for(existing), new, existing, 15, 0)
    assert new.turn_id == 42
    assert [t.turn_id for t in existing] == [0, 1]
    assert isinstance(plan, AppendPlan)
    with pytest.raises(AttributeError):
        plan.total_tokens = 1  # type: ignore[misc]


def test_summary_input_prepends_previous_summary() -> None:
    evicted = stored(3, 4)
    turns = summary_input("earlier stuff", evicted)
    assert [t.turn_id for t in turns] == [SUMMARY_TURN_ID, 0, 1]
    assert turns[0].user_prompt == SUMMARY_TURN_PROMPT
    assert turns[0].assistant_response == "earlier stuff"
    assert [t.turn_id for t in summary_input(None, evicted)] == [0, 1]
    assert [t.turn_id for t in summary_input("", evicted)] == [0, 1]


def test_history_suffix_is_contiguous_newest_run() -> None:
    turns = stored(5, 1, 8, 3, 4)
    assert [t.turn_id for t in history_suffix(turns, 15)] == [2, 3, 4]
    # turn 2 (8 tokens) does not fit in 10: stop there, do not skip to the smaller turn 1
    assert [t.turn_id for t in history_suffix(turns, 10)] == [3, 4]
    assert [t.turn_id for t in history_suffix(turns, 100)] == [0, 1, 2, 3, 4]
    # an oversize newest turn is kept (issue 33; the modelled module gave [])
    assert [t.turn_id for t in history_suffix(turns, 3)] == [4]
    assert [t.turn_id for t in history_suffix(turns, None)] == [0, 1, 2, 3, 4]
    assert history_suffix([], 10) == []


# --------------------------------------------------------------------------- limits


def with_messages(head: HeadState, turns: list[ConversationTurn]) -> HeadState:
    return HeadState(
        next_turn_id=head.next_turn_id,
        total_tokens=head.total_tokens,
        turn_count=head.turn_count,
        version=head.version,
        total_messages=sum(t.message_count for t in turns),
    )


def test_max_messages_evicts_whole_turns_alongside_the_token_budget() -> None:
    existing = stored(1, 1, 1, 1)  # plain turns: two messages each
    head = with_messages(head_for(existing), existing)
    plan = plan_append(head, turn(0, 1), existing, Limits(max_tokens=100, max_messages=5))
    assert plan.evicted_turn_ids == (0, 1, 2)  # 5 turns = 10 messages -> 2 turns = 4
    assert (plan.turn_count, plan.total_messages, plan.reason) == (2, 4, "max_messages")
    # The token budget still applies when messages are within their limit.
    plan = plan_append(head, turn(0, 99), existing, Limits(max_tokens=100, max_messages=50))
    assert plan.evicted_turn_ids == (0, 1, 2) and plan.reason == "max_tokens"  # 1 + 99 fit


def test_pinned_turns_stay_and_the_oldest_unpinned_go() -> None:
    existing = stored(10, 10, 10, 10, 10)
    head = with_messages(head_for(existing), existing)
    plan = plan_append(head, turn(0, 10), existing, Limits(max_tokens=40, pin_count=2))
    assert plan.evicted_turn_ids == (2, 3)
    assert (plan.turn_count, plan.total_tokens) == (4, 40)


def test_recent_count_evicts_the_whole_middle_at_once() -> None:
    existing = stored(10, 10, 10, 10, 10, 10)
    head = with_messages(head_for(existing), existing)
    limits = Limits(max_tokens=65, pin_count=1, recent_count=2)
    plan = plan_append(head, turn(0, 10), existing, limits, has_summarizer=True)
    # Pinned turn 0 and the newest two (stored 5 and the new one) stay.
    assert plan.evicted_turn_ids == (1, 2, 3, 4) and plan.summarize
    assert plan.turn_count == 3
    # Below the budget nothing moves, whatever recent_count says.
    plan = plan_append(head, turn(0, 1), existing, Limits(max_tokens=100, recent_count=1))
    assert plan.evicted_turn_ids == ()


def test_pinned_turns_are_kept_even_over_budget_but_the_new_turn_is_never_evicted() -> None:
    existing = stored(50, 50)
    head = with_messages(head_for(existing), existing)
    plan = plan_append(head, turn(0, 50), existing, Limits(max_tokens=60, pin_count=2))
    assert plan.evicted_turn_ids == () and plan.total_tokens == 150


def test_message_count_of_a_turn() -> None:
    assert ConversationTurn().message_count == 2
    assert ConversationTurn(raw_messages=[{"a": 1}] * 3).message_count == 3
    assert ConversationTurn(message_count=7).message_count == 7


# --------------------------------------------------------------------------- the budget rule


@settings(max_examples=200, deadline=None)
@given(
    estimates=st.lists(st.integers(1, 40), max_size=12),
    new=st.integers(1, 60),
    max_tokens=st.none() | st.integers(1, 150),
    threshold=st.none() | st.integers(0, 150),
    pin_count=st.integers(0, 3),
)
def test_the_token_rule_holds_on_every_path(
    estimates: list[int],
    new: int,
    max_tokens: int | None,
    threshold: int | None,
    pin_count: int,
) -> None:
    """Issue 33: the planner evicts exactly when the SQL one-statement append's cap
    (``eviction_caps`` / ``within_caps``) refuses, starts above the threshold
    whatever max_tokens is, and stops at the lower of the two."""
    existing = stored(*estimates)
    limits = Limits(max_tokens=max_tokens, summarize_threshold=threshold, pin_count=pin_count)
    plan = plan_append(head_for(existing), turn(0, new), existing, limits)
    total = sum(estimates) + new
    trigger, target = token_caps(max_tokens, threshold)
    assert no_eviction_needed(total, 0, limits) == (total <= trigger)
    evictable = max(len(existing) - pin_count, 0)
    if total <= trigger:
        assert plan.evicted_turn_ids == ()
        return
    if threshold:  # a threshold triggers, whatever max_tokens is
        assert trigger == threshold
    assert target == min(c for c in (max_tokens, threshold or None) if c is not None)
    evicted = len(plan.evicted_turn_ids)
    assert plan.evicted_turn_ids == tuple(range(pin_count, pin_count + evicted))  # oldest first
    assert plan.total_tokens == total - sum(estimates[pin_count : pin_count + evicted])
    if evicted < evictable:  # it stopped: down to the target ...
        assert plan.total_tokens <= target
    if evicted:  # ... and not one turn further
        assert plan.total_tokens + estimates[pin_count + evicted - 1] > target
    expected = "max_tokens"
    if max_tokens is None or trigger < max_tokens:
        expected = "summarize_threshold"
    assert plan.reason == (expected if evicted else None)
