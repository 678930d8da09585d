"""MemoryManager forwards branch / rewind / copy, the branch tree, the conversation list
and usage totals to its conversation memory (issue 32), sync and async, on the
memory store and SQLite; a fork's branches and copies are conversations it
started (its ``clear_all`` clears them, never the parent's)."""

from __future__ import annotations

from typing import Any

import pytest
from modes import call
from store_backends import OpenedBackend, backend_params

from firefly_orm.errors import ConversationNotFoundError
from firefly_orm.manager import MemoryManager


def _usage(n: int) -> dict[str, Any]:
    return {"usage": {"requests": 1, "input_tokens": n, "total_tokens": n}}


@pytest.mark.parametrize("layer_backend", backend_params(["memory", "sqlite"]), indirect=True)
async def test_tree_listing_and_usage_through_the_manager(
    layer_backend: OpenedBackend, mode: str
) -> None:
    root = MemoryManager(store=layer_backend.store, max_conversation_tokens=None)
    mgr = root.for_user("u1")
    cid = await call(mode, mgr, "new_conversation")
    for n in range(4):
        await call(mode, mgr, "add_turn", cid, f"q{n}", f"a{n}", metadata=_usage(n + 1))
    await call(mode, mgr, "update_conversation", cid, title="Trip to Lisbon", tags=["travel"])

    # Edit turn 2's prompt: branch at turn 1, then add the edited turn on the branch.
    branch = await call(mode, mgr, "branch", cid, 1)
    await call(mode, mgr, "add_turn", branch, "q2 edited", "a2'", metadata=_usage(10))
    turns = await call(mode, mgr.conversation, "get_turns", branch)
    assert [t.user_prompt for t in turns] == ["q0", "q1", "q2 edited"]
    [link] = await call(mode, mgr, "branches", cid)
    assert (link.conversation_id, link.parent_id, link.at_turn) == (branch, cid, 1)
    assert (await call(mode, mgr, "parent_of", branch)) == link
    assert await call(mode, mgr, "parent_of", cid) is None

    assert await call(mode, mgr, "rewind", cid, 2) == [3]
    assert [t.turn_id for t in await call(mode, mgr, "get_rewound_turns", cid)] == [3]
    assert await call(mode, mgr, "purge_rewound", cid) == 1
    popped = await call(mode, mgr, "pop_turn", cid)
    assert popped is not None and popped.turn_id == 2
    copy = await call(mode, mgr, "copy_conversation", cid)
    assert (await call(mode, mgr, "conversation_info", copy)).turn_count == 2

    page = await call(mode, mgr, "list_conversations", limit=10)
    assert {info.conversation_id for info in page.items} == {cid, branch, copy}
    assert next(i for i in page.items if i.conversation_id == cid).title == "Trip to Lisbon"
    # Live turns of cid: 0, 1 (usage 1 + 2); the branch's own turn: 10; copies count once.
    [total] = await call(mode, mgr, "usage_totals")
    assert (total.turns, total.input_tokens) == (3, 13)

    other = root.for_user("u2")
    with pytest.raises(ConversationNotFoundError):
        await call(mode, other, "branch", cid, 0)
    assert (await call(mode, other, "list_conversations")).items == []


def test_a_forks_branches_are_its_own() -> None:
    parent = MemoryManager(max_conversation_tokens=None)
    cid = parent.new_conversation()
    parent.add_turn(cid, "q", "a")
    child = parent.fork(working_scope_id="child")
    branch = child.branch(cid, 0)
    copy = child.copy_conversation(cid)
    child.clear_all()
    assert parent.conversation_exists(cid)
    assert not parent.conversation_exists(branch) and not parent.conversation_exists(copy)
