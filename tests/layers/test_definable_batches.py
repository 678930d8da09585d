"""definable's Memory on every store: add_many all or nothing, updated_at from edits.

``get_entries(session_id, user_id)`` filters by the session's owner and every
entry carries ``role``, ``user_id`` and ``updated_at``.
"""

from __future__ import annotations

import pytest
from modes import call
from store_backends import OpenedBackend, layer_mode_params

from firefly_orm.compat.definable import Memory
from firefly_orm.conversation import ConversationTurn
from firefly_orm.errors import ConversationNotFoundError, NotFoundError

BACKEND_MODES = pytest.mark.parametrize(
    ("layer_backend", "mode"),
    layer_mode_params(async_on=("memory", "sqlite", "postgres")),
    indirect=True,
)


class Down(RuntimeError):
    pass


def down(turns: list[ConversationTurn]) -> str:
    raise Down("no summaries today")


def msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


@BACKEND_MODES
async def test_add_many_is_all_or_nothing(layer_backend: OpenedBackend, mode: str) -> None:
    memory = Memory(store=layer_backend.store)
    await call(mode, memory, "add_many", [msg("user", "q0"), msg("assistant", "a0")], "s", "ada")
    # Three more messages exceed max_messages=4: the eviction needs a summary, the
    # summarizer fails, and none of the three is stored.
    strict = Memory(store=layer_backend.store, model=down, max_messages=4)
    with pytest.raises(Down):
        await call(
            mode,
            strict,
            "add_many",
            [msg("user", "q1"), msg("assistant", "a1"), msg("user", "q2")],
            "s",
            "ada",
        )
    entries = await call(mode, memory, "get_entries", "s", "ada")
    assert [(e.role, e.content, e.user_id) for e in entries] == [
        ("user", "q0", "ada"),
        ("assistant", "a0", "ada"),
    ]
    assert await call(mode, memory, "get_entries", "s", "bob") == []
    with pytest.raises(ConversationNotFoundError):  # another user's session: nothing written
        await call(mode, memory, "add_many", [msg("user", "x")] * 2, "s", "bob")
    assert len(await call(mode, memory, "get_entries", "s")) == 2


@BACKEND_MODES
async def test_an_edit_sets_updated_at(layer_backend: OpenedBackend, mode: str) -> None:
    memory = Memory(store=layer_backend.store)
    added = await call(
        mode, memory, "add_many", [msg("user", "hi"), msg("assistant", "hello")], "s", "ada"
    )
    assert all(e.updated_at == e.created_at for e in added)
    edited = await call(mode, memory, "update", "s", added[1].turn_id, "hello, Ada", "ada")
    assert (edited.role, edited.content, edited.user_id) == ("assistant", "hello, Ada", "ada")
    assert edited.updated_at > edited.created_at == added[1].created_at
    reopened = Memory(store=layer_backend.reopen())
    entries = await call(mode, reopened, "get_entries", "s", "ada")
    assert [(e.content, e.updated_at > e.created_at) for e in entries] == [
        ("hi", False),
        ("hello, Ada", True),
    ]
    assert entries[1].updated_at == edited.updated_at
    with pytest.raises(ConversationNotFoundError):
        await call(mode, memory, "update", "s", added[0].turn_id, "x", "bob")
    with pytest.raises(NotFoundError):
        await call(mode, memory, "update", "s", 99, "x", "ada")
    memory.enabled = False
    assert await call(mode, memory, "update", "s", added[0].turn_id, "x", "ada") is None
