"""group_messages: where messages added one at a time start turns (pure, hypothesis).

A new turn starts only at a message that opens a history, once the current
turn has a response and no tool call waiting; so a call and its result always
share a turn.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from firefly_orm.conversation._batch import Shape, group_messages
from firefly_orm.errors import EntryValidationError

USER = Shape(opens=True, responds=False)
TEXT = Shape(opens=False, responds=True)


@st.composite
def conversations(draw: st.DrawFn) -> list[Shape]:
    """A message sequence: prompts, answers, tool calls and (some of) their results."""
    shapes: list[Shape] = []
    pending: list[str] = []
    for n in range(draw(st.integers(0, 25))):
        action = draw(st.sampled_from(["user", "text", "call", "result"]))
        if action == "result" and pending:
            call_id = pending.pop(draw(st.integers(0, len(pending) - 1)))
            shapes.append(Shape(opens=False, responds=False, results=(call_id,)))
        elif action == "call":
            pending.append(f"c{n}")
            shapes.append(Shape(opens=False, responds=True, calls=(f"c{n}",)))
        else:
            shapes.append(USER if action == "user" else TEXT)
    return shapes


def turns_of(count: int, joined: int, starts: list[int]) -> list[int]:
    """The turn number of each message (-1: joined the stored turn)."""
    owner = [-1] * count
    for number, start in enumerate(starts):
        for index in range(start, count):
            owner[index] = number
    assert all(owner[i] == -1 for i in range(joined))
    return owner


@given(conversations(), st.booleans())
def test_a_call_and_its_result_share_a_turn(shapes: list[Shape], stored: bool) -> None:
    joined, starts = group_messages(shapes, [USER, TEXT] if stored else None)
    owner = turns_of(len(shapes), joined, starts)
    assert starts == sorted(set(starts)) and all(s >= joined for s in starts)
    if not stored and shapes:
        assert (joined, starts[0]) == (0, 0)
    for index in starts:
        assert index == 0 or shapes[index].opens
    where = {c: i for i, s in enumerate(shapes) for c in s.calls}
    for i, shape in enumerate(shapes):
        for call_id in shape.results:
            assert owner[where[call_id]] == owner[i]


def test_the_rules_on_a_tool_round() -> None:
    call = Shape(opens=False, responds=True, calls=("t",))
    result = Shape(opens=False, responds=False, results=("t",))
    # A prompt while the call waits joins; after the result and an answer, it starts a turn.
    assert group_messages([USER, call, USER, result, TEXT, USER], None) == (0, [0, 5])
    # Joining the stored turn: it has no answer yet, so a prompt joins it too.
    assert group_messages([USER, TEXT, USER], [USER]) == (2, [2])
    assert group_messages([TEXT], [USER, TEXT]) == (1, [])
    assert group_messages([], None) == (0, [])


def test_a_result_of_no_call_in_its_turn_is_refused() -> None:
    call = Shape(opens=False, responds=True, calls=("t",))
    stray = Shape(opens=False, responds=False, results=("nope",))
    # It would join a complete turn, which the history reads then never give back.
    with pytest.raises(EntryValidationError, match="nope"):
        group_messages([stray], [USER, TEXT])
    with pytest.raises(EntryValidationError, match="nope"):
        group_messages([USER, call, stray], None)
    with pytest.raises(EntryValidationError, match="nope"):
        group_messages([stray], None)  # a stored turn of another kind: a new turn
    # The stored turn's call is answered by a result added later (another process).
    assert group_messages([Shape(opens=False, responds=False, results=("t",))], [USER, call]) == (
        1,
        [],
    )


def test_a_stored_turn_is_not_checked_again() -> None:
    stray = Shape(opens=False, responds=False, results=("old",))
    assert group_messages([USER], [USER, TEXT, stray]) == (0, [0])
