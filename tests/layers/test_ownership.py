"""A user's conversations are theirs alone, on every store (issue 34, section 1).

Two users, each with a bound :class:`MemoryManager`, drive random operations
through every public entry point that names a conversation (the manager's and
its ``conversation``'s); a model of who owns what says what each must do:

* on a conversation that is missing or the other user's, every read, write,
  edit, clear and export raises :class:`ConversationNotFoundError` (the same
  error for both) and nothing is written;
* creating writes (``add_turn``, ``import_conversation``) create the
  conversation as the caller's, and refuse the other user's;
* ``exists`` / ``owner_of`` never reveal the other user's conversations.

After each example an unbound (admin) memory checks the stored truth: each
conversation's owner is the model's, and every turn in it was written by its
owner.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from modes import call

from firefly_orm import ConversationNotFoundError, EntryValidationError, NotFoundError
from firefly_orm.conversation import ConversationMemory
from firefly_orm.long_term import LongTermMemory
from firefly_orm.manager import MemoryManager

USERS = ("ann", "bob")

#: What an operation does to the model when it succeeds.
READ, WRITE, CREATE, CLEAR = "read", "write", "create", "clear"


def _import(m: MemoryManager, cid: str, user: str) -> Any:
    data = {"turns": [{"user_prompt": f"{user}: imported", "assistant_response": "ok"}]}
    return m.conversation.import_conversation(data, conversation_id=cid)


#: name -> (kind, call(manager, conversation id, user)).
OPERATIONS: dict[str, tuple[str, Callable[[MemoryManager, str, str], Any]]] = {
    "add_turn": (CREATE, lambda m, c, u: m.add_turn(c, f"{u}: hello", "hi")),
    "conversation.add_turn": (
        CREATE,
        lambda m, c, u: m.conversation.add_turn(c, f"{u}: again", "yes"),
    ),
    "import_conversation": (CREATE, _import),
    "get_turns": (READ, lambda m, c, u: m.conversation.get_turns(c)),
    "get_archived_turns": (READ, lambda m, c, u: m.conversation.get_archived_turns(c)),
    "get_context": (READ, lambda m, c, u: m.get_context(c)),
    "conversation.get_context": (READ, lambda m, c, u: m.conversation.get_context(c)),
    "get_message_history": (READ, lambda m, c, u: m.get_message_history(c)),
    "get_recent": (READ, lambda m, c, u: m.conversation.get_recent(c, 2)),
    "get_recent_messages": (READ, lambda m, c, u: m.get_recent_messages(c, 2)),
    "get_total_tokens": (READ, lambda m, c, u: m.conversation.get_total_tokens(c)),
    "get_summary": (READ, lambda m, c, u: m.conversation.get_summary(c)),
    "export_conversation": (READ, lambda m, c, u: m.conversation.export_conversation(c)),
    "to_dict": (READ, lambda m, c, u: m.conversation.to_dict(c)),
    "assemble_context": (READ, lambda m, c, u: m.assemble_context(c, query="hello")),
    "verify_conversation": (READ, lambda m, c, u: m.verify_conversation(c)),
    "owner_of": (READ, lambda m, c, u: m.owner_of(c)),
    "update_turn": (
        WRITE,
        lambda m, c, u: m.conversation.update_turn(c, 0, user_prompt=f"{u}: edited"),
    ),
    "delete_turn": (WRITE, lambda m, c, u: m.conversation.delete_turn(c, 0)),
    "repair_conversation": (WRITE, lambda m, c, u: m.repair_conversation(c)),
    "clear_conversation": (CLEAR, lambda m, c, u: m.clear_conversation(c)),
    "conversation.clear": (CLEAR, lambda m, c, u: m.conversation.clear(c)),
}

steps = st.lists(
    st.tuples(st.sampled_from(USERS), st.sampled_from(sorted(OPERATIONS)), st.integers(0, 2)),
    min_size=1,
    max_size=10,
)


def _snapshot(admin: ConversationMemory, cids: list[str]) -> list[Any]:
    """Everything stored about ``cids``, as the admin sees it."""
    return [
        (admin.owner_of(c), admin.export_conversation(c)["turns"]) if admin.exists(c) else None
        for c in cids
    ]


@pytest.mark.timeout(300)
def test_no_cross_user_read_or_write_ever_succeeds(store: Any) -> None:
    admin = ConversationMemory(store=store)
    managers = {u: MemoryManager(store=store, user_id=u) for u in USERS}

    @settings(
        max_examples=15,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(steps=steps)
    def run(steps: list[tuple[str, str, int]]) -> None:
        prefix = uuid.uuid4().hex[:8]
        cids = [f"{prefix}-{i}" for i in range(3)]
        owner: dict[str, str] = {}
        for user, name, index in steps:
            cid = cids[index]
            kind, operation = OPERATIONS[name]
            mine = owner.get(cid) == user
            allowed = mine or (kind == CREATE and cid not in owner)
            before = _snapshot(admin, cids)
            if not allowed:
                with pytest.raises(ConversationNotFoundError) as refused:
                    operation(managers[user], cid, user)
                assert str(refused.value) == f"conversation {cid!r} not found", name
                assert _snapshot(admin, cids) == before, f"{name} wrote after refusing"
                assert managers[user].conversation_exists(cid) is False
                continue
            try:
                result = operation(managers[user], cid, user)
            except NotFoundError as exc:  # an own conversation without turn 0
                assert not isinstance(exc, ConversationNotFoundError), (name, exc)
                assert kind == WRITE
                continue
            if kind == CREATE:
                owner[cid] = user
            elif kind == CLEAR:
                owner.pop(cid)
            if name == "get_turns":
                assert all(t.user_prompt.startswith(f"{user}:") for t in result)
            if name == "owner_of":
                assert result == user
            assert managers[user].conversation_exists(cid) is (cid in owner)
        for cid in cids:  # the stored truth, seen by the admin
            assert admin.exists(cid) is (cid in owner)
            if cid in owner:
                assert admin.owner_of(cid) == owner[cid]
                turns = admin.get_turns(cid)
                assert all(t.user_prompt.startswith(f"{owner[cid]}:") for t in turns)

    run()


async def test_the_async_forms_refuse_alike(store: Any, mode: str) -> None:
    ann = MemoryManager(store=store, user_id="ann")
    bob = MemoryManager(store=store, user_id="bob")
    cid = await call(mode, ann, "new_conversation")
    await call(mode, ann, "add_turn", cid, "ann: secret", "noted")
    for method, args in (
        ("get_context", (cid,)),
        ("get_message_history", (cid,)),
        ("get_recent_messages", (cid, 5)),
        ("assemble_context", (cid,)),
        ("add_turn", (cid, "bob: hi", "hi")),
        ("clear_conversation", (cid,)),
        ("owner_of", (cid,)),
    ):
        with pytest.raises(ConversationNotFoundError, match="not found"):
            await call(mode, bob, method, *args)
    assert await call(mode, bob, "conversation_exists", cid) is False
    assert await call(mode, bob, "conversation_exists", "never-made") is False
    with pytest.raises(ConversationNotFoundError, match="not found"):
        await call(mode, bob, "owner_of", "never-made")  # the same error as bob got above
    assert await call(mode, ann, "owner_of", cid) == "ann"
    assert [t.user_prompt for t in await call(mode, ann.conversation, "get_turns", cid)] == [
        "ann: secret"
    ]


async def test_a_bound_manager_creates_as_its_user_and_erases_it_all(store: Any, mode: str) -> None:
    admin = MemoryManager(store=store)
    bob = MemoryManager(store=store, user_id="bob")
    await call(mode, bob, "add_turn", "made-by-add-turn", "bob: hi", "hi")
    imported = await call(
        mode,
        bob.conversation,
        "import_conversation",
        {"turns": [{"user_prompt": "bob: old", "assistant_response": "x"}]},
        conversation_id="made-by-import",
    )
    assert await call(mode, admin, "owner_of", "made-by-add-turn") == "bob"
    assert await call(mode, admin, "owner_of", imported) == "bob"
    assert sorted(await call(mode, bob, "user_conversations", "bob")) == sorted(
        ["made-by-add-turn", "made-by-import"]
    )
    with pytest.raises(EntryValidationError, match="serves user 'bob' only"):
        await call(mode, bob, "user_conversations", "ann")
    with pytest.raises(EntryValidationError, match="serves user 'bob' only"):
        await call(mode, bob, "erase_user", "ann")
    await call(mode, bob, "erase_user", "bob")
    assert await call(mode, admin, "conversation_exists", "made-by-add-turn") is False
    assert await call(mode, admin, "conversation_exists", "made-by-import") is False


async def test_a_bound_clear_all_and_listing_cover_the_users_conversations_only(
    store: Any, mode: str
) -> None:
    admin = ConversationMemory(store=store)
    ann = admin.for_user("ann")
    theirs = await call(mode, admin, "new_conversation", user_id="bob")
    nobodys = await call(mode, admin, "new_conversation")
    mine = await call(mode, ann, "new_conversation")
    listed = ann.conversation_ids if mode == "sync" else await ann.async_conversation_ids()
    assert listed == [mine]
    await call(mode, ann, "clear_all")
    assert await call(mode, admin, "exists", mine) is False
    assert await call(mode, admin, "exists", theirs) is True
    assert await call(mode, admin, "exists", nobodys) is True
    with pytest.raises(ConversationNotFoundError):
        await call(mode, ann, "get_turns", nobodys)  # an unowned conversation is not ann's
    with pytest.raises(EntryValidationError, match="serves user 'ann' only"):
        ann.for_user("bob")


async def test_a_bound_long_term_memory_imports_for_its_user_only(store: Any, mode: str) -> None:
    bob_items = LongTermMemory(store=store, user_id="bob")
    kept = await call(mode, bob_items, "remember", "bob's own note")
    ann_items = LongTermMemory(store=store, user_id="ann")
    with pytest.raises(EntryValidationError, match=r"items\[0\].user_id"):
        await call(mode, ann_items, "import_items", [{"text": "planted", "user_id": "bob"}])
    # An unowned item exported with bob's item id becomes ann's, never overwrites bob's.
    (new_id,) = await call(mode, ann_items, "import_items", [{"text": "mine", "id": kept}])
    assert new_id != kept
    assert (await call(mode, bob_items, "get", kept)).text == "bob's own note"
    assert (await call(mode, ann_items, "get", new_id)).user_id == "ann"


@pytest.mark.parametrize(
    "namespace",
    ["conversation:c1", "conversation-archive:c1", "conversation-index", "working:s", "artifacts"],
)
def test_long_term_memory_never_writes_into_another_layers_namespace(
    store: Any, namespace: str
) -> None:
    # A long-term item there would read as a turn, a fact or a workspace file of its owner.
    with pytest.raises(EntryValidationError, match="namespace"):
        LongTermMemory(store=store, namespace=namespace, user_id="ann")
    with pytest.raises(EntryValidationError, match="namespace"):
        LongTermMemory(store=store, namespace="artifacts:w@bob")
