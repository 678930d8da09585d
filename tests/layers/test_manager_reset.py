"""MemoryManager.reset() and clone_for_isolation() on every store (selectools' calls).

reset(): conversations, facts and episodic items go in one unit of work, semantic
items and the daily logs stay.  clone_for_isolation(): a fork with copied facts and
a copied conversation; what either writes there never reaches the other.
"""

from __future__ import annotations

import pytest
from modes import call
from store_backends import OpenedBackend, layer_mode_params

from firefly_orm.errors import ConversationNotFoundError
from firefly_orm.manager import MemoryManager

BACKEND_MODES = pytest.mark.parametrize(
    ("layer_backend", "mode"),
    layer_mode_params(async_on=("memory", "sqlite", "mongo")),
    indirect=True,
)


@BACKEND_MODES
async def test_reset_clears_short_term_and_episodic_and_keeps_knowledge(
    layer_backend: OpenedBackend, mode: str
) -> None:
    ada = MemoryManager(store=layer_backend.store, user_id="ada")
    bob = MemoryManager(store=layer_backend.store, user_id="bob")
    cid = await call(mode, ada, "new_conversation")
    await call(mode, ada, "add_turn", cid, "hi", "hello")
    bob_cid = await call(mode, bob, "new_conversation")
    await call(mode, ada, "set_fact", "mood", "happy")
    await call(mode, ada, "remember", "Ada likes tea")
    await call(mode, ada, "remember", "Ada met Bob today", kind="episodic")
    await call(mode, bob, "remember", "Bob met Ada today", kind="episodic")
    await call(mode, ada, "reset")
    again = MemoryManager(store=layer_backend.reopen(), user_id="ada")
    assert not await call(mode, again, "conversation_exists", cid)
    assert await call(mode, again, "get_fact", "mood") is None
    assert [i.text for i in await call(mode, again.long_term, "list")] == ["Ada likes tea"]
    assert len(await call(mode, again.long_term, "log_days")) == 1  # the log is kept
    # Another user's memory is untouched.
    assert await call(mode, bob, "conversation_exists", bob_cid)
    assert [i.text for i in await call(mode, bob.long_term, "list")] == ["Bob met Ada today"]
    # A fork resets only the conversations it started.
    fork = ada.fork(working_scope_id="sub")
    mine = await call(mode, fork, "new_conversation")
    shared = await call(mode, ada, "new_conversation")
    await call(mode, fork, "reset")
    assert not await call(mode, ada, "conversation_exists", mine)
    assert await call(mode, ada, "conversation_exists", shared)


@BACKEND_MODES
async def test_a_clone_is_isolated_from_its_original(
    layer_backend: OpenedBackend, mode: str
) -> None:
    mgr = MemoryManager(store=layer_backend.store, user_id="ada")
    cid = await call(mode, mgr, "new_conversation")
    await call(mode, mgr, "add_turn", cid, "hi", "hello", metadata={"n": 1})
    await call(mode, mgr, "set_fact", "name", "Ada")
    clone = await call(mode, mgr, "clone_for_isolation", conversation_id=cid)
    copy = clone.conversation_copies[cid]
    assert copy != cid and clone.parent is mgr
    copied = await call(mode, clone.conversation, "get_turns", copy)
    assert [(t.turn_id, t.user_prompt, t.metadata) for t in copied] == [(0, "hi", {"n": 1})]
    assert await call(mode, clone, "owner_of", copy) == "ada"
    assert await call(mode, clone, "get_fact", "name") == "Ada"
    await call(mode, clone, "add_turn", copy, "more", "sure")
    await call(mode, clone, "set_fact", "name", "Clone")
    await call(mode, mgr, "add_turn", cid, "again", "yes")
    assert [t.user_prompt for t in await call(mode, mgr.conversation, "get_turns", cid)] == [
        "hi",
        "again",
    ]
    assert [t.user_prompt for t in await call(mode, clone.conversation, "get_turns", copy)] == [
        "hi",
        "more",
    ]
    assert await call(mode, mgr, "get_fact", "name") == "Ada"
    await call(mode, clone, "clear_all")  # the clone's copy and facts only
    assert not await call(mode, mgr, "conversation_exists", copy)
    assert await call(mode, mgr, "conversation_exists", cid)
    bob = MemoryManager(store=layer_backend.store, user_id="bob")
    with pytest.raises(ConversationNotFoundError):
        await call(mode, bob, "clone_for_isolation", conversation_id=cid)
    plain = await call(mode, mgr, "clone_for_isolation")
    assert plain.conversation_copies == {}
    assert await call(mode, plain, "get_fact", "name") == "Ada"
