"""A run for a user without a conversation id continues the user's current conversation.

definable's quick start passes only ``user_id=``: each run must see the
history of the previous ones.  On every store (conftest's ``store``), for each
of ``run_sync``, ``run``, ``run_stream`` and ``iter``: the second run continues
the conversation the first started (and the model sees the first prompt),
``new_conversation=True`` starts another one which becomes the current one,
``conversation_id=`` still wins, two users never share a current
conversation, and a run for no user starts a new conversation each time.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from integration.test_adapter_ownership import HOWS, Model, make_agent, run_once

from firefly_orm.errors import EntryValidationError
from firefly_orm.manager import MemoryManager
from firefly_orm.store import InMemoryStore


@pytest.mark.parametrize("how", HOWS)
async def test_a_users_runs_continue_their_current_conversation(store: Any, how: str) -> None:
    model = Model()
    admin = MemoryManager(store=store)
    support = make_agent(model, admin)

    first = await run_once(support, how, None, "ada")
    second = await run_once(support, how, None, "ada")
    assert second == first
    assert "Show me" in model.calls[-1]  # the first run's prompt is in the history
    turns = await admin.conversation.async_get_turns(first)
    assert [t.turn_id for t in turns] == [0, 1]

    fresh = await run_once(support, how, None, "ada", new=True)
    assert fresh != first
    assert await run_once(support, how, None, "ada") == fresh  # the newest is current
    assert await run_once(support, how, first, "ada") == first  # an explicit id wins

    bob = await run_once(support, how, None, "bob")
    assert bob not in (first, fresh)
    assert await admin.async_owner_of(bob) == "bob"
    assert sorted(await admin.async_user_conversations("ada")) == sorted([first, fresh])

    # no user: nobody's current conversation, a new one each run
    anonymous = {await run_once(support, how, None, None) for _ in range(2)}
    assert len(anonymous) == 2 and not anonymous & {first, fresh, bob}


def test_a_bound_manager_continues_its_users_conversation() -> None:
    model = Model()
    ada = MemoryManager(store=InMemoryStore(), user_id="ada")
    support = make_agent(model, ada)
    first = support.run_sync("one").conversation_id
    second = support.run_sync("two")
    assert second.conversation_id == first and second.turn_id == 1
    assert ada.user_conversations("ada") == [first]
    assert "one" in model.calls[-1]


async def test_new_conversation_with_an_id_is_refused_before_any_io() -> None:
    model = Model()
    store = InMemoryStore()
    support = make_agent(model, MemoryManager(store=store))
    with pytest.raises(EntryValidationError, match="not both"):
        await support.run("hi", conversation_id="c1", user_id="ada", new_conversation=True)
    with pytest.raises(TypeError, match="new_conversation"):
        support.run_sync("hi", user_id="ada", new_conversation="yes")  # type: ignore[arg-type]
    with pytest.raises(EntryValidationError, match="new_conversation=True"):
        await support.run("hi", conversation_id="new")
    assert model.calls == [] and store.load("conversation:c1") == []
