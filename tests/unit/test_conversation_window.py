"""Message windows: what a model is handed is valid for the provider, whatever the cut.

Property-based (hypothesis) over random tool-heavy conversations in both message
styles (OpenAI-style dicts and pydantic-ai messages) and random limits, plus the
pinned-prefix rule and the message inspection of each format.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import messages as pai

from firefly_orm.conversation._codec import encode_raw_messages
from firefly_orm.conversation._messages import MessageInfo, inspect_encoded
from firefly_orm.conversation._window import Slot, closed_prefix, window_start

# --------------------------------------------------------------------------- generators


@st.composite
def dict_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A valid OpenAI-style conversation: user turns, tool rounds, answers."""
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": "be brief"})
    call = 0
    for _ in range(draw(st.integers(1, 6))):
        messages.append({"role": "user", "content": draw(st.text(max_size=20))})
        for _ in range(draw(st.integers(0, 3))):
            ids = [f"c{call + i}" for i in range(draw(st.integers(1, 3)))]
            call += len(ids)
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                        for i in ids
                    ],
                }
            )
            messages.extend({"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids)
        messages.append({"role": "assistant", "content": draw(st.text(max_size=20))})
    return messages


@st.composite
def pydantic_ai_conversations(draw: st.DrawFn) -> list[pai.ModelMessage]:
    """A valid pydantic-ai conversation with tool calls, returns and retries."""
    messages: list[pai.ModelMessage] = []
    call = 0
    for _ in range(draw(st.integers(1, 5))):
        messages.append(pai.ModelRequest(parts=[pai.UserPromptPart(content="question")]))
        for _ in range(draw(st.integers(0, 3))):
            ids = [f"t{call + i}" for i in range(draw(st.integers(1, 2)))]
            call += len(ids)
            messages.append(
                pai.ModelResponse(parts=[pai.ToolCallPart("f", {"x": 1}, i) for i in ids])
            )
            messages.append(
                pai.ModelRequest(parts=[pai.ToolReturnPart("f", "result", i) for i in ids])
            )
        messages.append(pai.ModelResponse(parts=[pai.TextPart(content="answer")]))
    return messages


def slots_for(infos: Sequence[MessageInfo], costs: Sequence[int]) -> list[Slot]:
    return [
        Slot(cost, info.opens, info.calls, info.results)
        for info, cost in zip(infos, costs, strict=True)
    ]


def assert_valid(window: Sequence[MessageInfo]) -> None:
    """What a provider requires of a history."""
    if not window:
        return
    assert window[0].opens, "a history must open with a user/system message"
    seen: set[str] = set()
    for info in window:
        for result in info.results:
            assert result in seen, f"tool result {result} without its call"
        seen.update(info.calls)


limits = st.tuples(st.none() | st.integers(0, 60), st.none() | st.integers(0, 12))


# --------------------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None)
@given(conversation=dict_conversations() | pydantic_ai_conversations(), data=st.data())
def test_every_window_is_valid_fits_and_is_the_longest(conversation: list[Any], data: Any) -> None:
    infos = inspect_encoded(encode_raw_messages(conversation))
    assert len(infos) == len(conversation)
    costs = data.draw(st.lists(st.integers(0, 9), min_size=len(infos), max_size=len(infos)))
    max_tokens, max_messages = data.draw(limits)
    slots = slots_for(infos, costs)

    start = window_start(slots, max_tokens=max_tokens, max_messages=max_messages)

    assert_valid(infos[start:])
    if max_tokens is not None:
        assert sum(costs[start:]) <= max_tokens
    if max_messages is not None:
        assert len(infos) - start <= max_messages
    for longer in range(start):  # nothing longer would have done
        fits = (max_tokens is None or sum(costs[longer:]) <= max_tokens) and (
            max_messages is None or len(infos) - longer <= max_messages
        )
        if fits:
            with pytest.raises(AssertionError):
                assert_valid(infos[longer:])


@settings(max_examples=100, deadline=None)
@given(conversation=dict_conversations() | pydantic_ai_conversations(), data=st.data())
def test_closed_prefix_answers_every_call(conversation: list[Any], data: Any) -> None:
    infos = inspect_encoded(encode_raw_messages(conversation))
    end = data.draw(st.integers(0, len(infos)))
    prefix = infos[:end]
    kept = closed_prefix(slots_for(prefix, [1] * len(prefix)))
    calls = {c for info in prefix[:kept] for c in info.calls}
    results = {r for info in prefix[:kept] for r in info.results}
    assert calls <= results
    # ... and it is the longest prefix with that property.
    for longer in range(kept + 1, end + 1):
        calls = {c for info in prefix[:longer] for c in info.calls}
        results = {r for info in prefix[:longer] for r in info.results}
        assert not calls <= results


@settings(max_examples=150, deadline=None)
@given(conversation=dict_conversations() | pydantic_ai_conversations(), data=st.data())
def test_keep_one_is_the_shortest_valid_window_when_nothing_fits(
    conversation: list[Any], data: Any
) -> None:
    """Issue 33: never an empty window while a valid one exists.  Whatever fits is
    unchanged; when nothing does, the newest start that opens and answers every
    result after it (the fewest messages a provider accepts), over the limits."""
    infos = inspect_encoded(encode_raw_messages(conversation))
    costs = data.draw(st.lists(st.integers(0, 40), min_size=len(infos), max_size=len(infos)))
    max_tokens, max_messages = data.draw(limits)
    slots = slots_for(infos, costs)

    plain = window_start(slots, max_tokens=max_tokens, max_messages=max_messages)
    kept = window_start(slots, max_tokens=max_tokens, max_messages=max_messages, keep_one=True)

    if plain < len(slots):
        assert kept == plain
        return
    valid = [s for s in range(len(slots)) if _valid(infos[s:])]
    assert valid, "a generated conversation is valid from its first message"
    assert kept == max(valid)  # the newest valid start: never empty, never a split pair
    assert_valid(infos[kept:])


def _valid(window: Sequence[MessageInfo]) -> bool:
    try:
        assert_valid(window)
    except AssertionError:
        return False
    return bool(window)


def test_keep_one_examples() -> None:
    tool_round = [
        Slot(1, True),  # the prompt
        Slot(1, False, calls=("c",)),  # the call
        Slot(50, False, results=("c",)),  # a big result
        Slot(1, False),  # the answer
    ]
    assert window_start(tool_round, max_tokens=10) == 4  # nothing fits
    assert window_start(tool_round, max_tokens=10, keep_one=True) == 0  # the pair stays whole
    chat = [Slot(30, True), Slot(30, False), Slot(2, True), Slot(2, False)]
    assert window_start(chat, max_tokens=5, keep_one=True) == 2  # the newest that fits
    assert window_start(chat, max_tokens=3, keep_one=True) == 2  # over, but the fewest
    orphan = [Slot(1, True, results=("gone",))]
    assert window_start(orphan, keep_one=True) == 1  # no valid window at all: empty
    assert window_start([], keep_one=True) == 0


# --------------------------------------------------------------------------- examples


def test_selectools_tool_pair_boundary() -> None:
    """A window of 3 messages would open on a tool result: it starts at the user instead."""
    conversation = [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "w1", "function": {"name": "weather", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "w1", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "You're welcome."},
    ]
    infos = inspect_encoded(encode_raw_messages(conversation))
    slots = slots_for(infos, [1] * len(infos))
    assert window_start(slots, max_messages=4) == 4  # not 2: the tool result would lead
    assert window_start(slots, max_messages=6) == 0
    assert window_start(slots, max_messages=1) == 6  # the answer alone cannot open


def test_inspection_reads_text_calls_and_results_of_each_format() -> None:
    anthropic = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "u1", "name": "f"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1"}]},
    ]
    infos = inspect_encoded(encode_raw_messages(anthropic))
    assert [i.opens for i in infos] == [True, False, False]
    assert infos[1].calls == ("u1",) and infos[2].results == ("u1",)
    big = " ".join(["word"] * 10_000)
    pyd = [
        pai.ModelRequest(parts=[pai.UserPromptPart(content="go")]),
        pai.ModelResponse(parts=[pai.ToolCallPart("search", {"q": "x"}, "s1")]),
        pai.ModelRequest(parts=[pai.ToolReturnPart("search", big, "s1")]),
    ]
    infos = inspect_encoded(encode_raw_messages(pyd))
    assert [i.opens for i in infos] == [True, False, False]
    assert infos[2].results == ("s1",) and big in infos[2].text
    assert '"q": "x"' in infos[1].text and "search" in infos[1].text
    opaque = inspect_encoded(encode_raw_messages(["a", {"no": "role"}]))
    assert [i.opens for i in opaque] == [True, True]
    assert inspect_encoded(None) == []


def test_a_whole_turn_slot_answers_its_own_calls() -> None:
    """History windows keep whole turns: one slot may make a call and carry its result."""
    turn = Slot(10, True, calls=("c1",), results=("c1",), messages=4)
    later = Slot(5, True, messages=2)
    assert window_start([turn, later], max_tokens=15) == 0
    assert window_start([turn, later], max_messages=5) == 1
    orphan = Slot(3, True, results=("gone",))
    assert window_start([orphan, later]) == 1
