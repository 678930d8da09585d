"""``ConversationMemory.import_conversations``: every item validated first, one unit of work.

Runs on every memory-layer backend (conftest's ``layer_backend``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from store_backends import OpenedBackend

from firefly_orm.conversation import ConversationMemory
from firefly_orm.errors import EntryValidationError

KEEP: dict[str, Any] = {
    "conversation_id": "keep",
    "turns": [{"user_prompt": "kept", "assistant_response": "as it was"}],
    "summary": "old",
}


def _state(mem: ConversationMemory) -> list[dict[str, Any]]:
    return [mem.export_conversation(cid) for cid in sorted(mem.conversation_ids)]


@pytest.fixture
def mem(layer_backend: OpenedBackend) -> ConversationMemory:
    memory = ConversationMemory(store=layer_backend.store)
    memory.import_conversation(KEEP)
    return memory


def test_imports_all_in_order(mem: ConversationMemory) -> None:
    items = [
        {"conversation_id": "b", "turns": [{"user_prompt": "x"}]},
        {"conversation_id": "keep", "turns": [{"user_prompt": "new"}]},
    ]
    assert mem.import_conversations(items) == ["b", "keep"]
    assert [t.user_prompt for t in mem.get_turns("keep")] == ["new"]
    assert mem.get_summary("keep") == "old"  # kept: the import has none
    assert sorted(mem.conversation_ids) == ["b", "keep"]
    assert mem.import_conversations([]) == []


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        (
            {"conversation_id": "bad", "turns": ["not a dict"]},
            "conversations[1]: conversation 'bad'",
        ),
        ("not a dict", "conversations[1]"),
        # Valid for the parser, refused by the store when written: the first
        # conversation's writes, in the same unit of work, are rolled back too.
        ({"conversation_id": "late", "turns": [{"user_prompt": "x\ud800"}]}, "surrogate"),
    ],
    ids=["bad-turn", "not-a-dict", "refused-at-write"],
)
def test_a_bad_second_item_leaves_everything_as_it_was(
    mem: ConversationMemory, second: Any, expected: str
) -> None:
    before = _state(mem)
    first = {"conversation_id": "first", "turns": [{"user_prompt": "a"}]}
    replacing = {"conversation_id": "keep", "turns": []}
    for items in ([first, second], [replacing, second]):
        with pytest.raises(EntryValidationError, match=expected.replace("[", r"\[")):
            mem.import_conversations(items)
        assert _state(mem) == before
    with pytest.raises(EntryValidationError, match=expected.replace("[", r"\[")):
        asyncio.run(mem.async_import_conversations([first, second]))
    assert _state(mem) == before


def test_conversation_id_needs_exactly_one_item(mem: ConversationMemory) -> None:
    item = {"turns": [{"user_prompt": "a"}]}
    assert mem.import_conversations([item], conversation_id="copy") == ["copy"]
    with pytest.raises(EntryValidationError, match="exactly one conversation"):
        mem.import_conversations([item, item], conversation_id="copy2")
    assert "copy2" not in mem.conversation_ids


def test_the_same_id_twice_is_refused(mem: ConversationMemory) -> None:
    before = _state(mem)
    for cid in ("first", "keep"):
        items: list[dict[str, Any]] = [{"conversation_id": cid, "turns": []}] * 2
        with pytest.raises(EntryValidationError, match="same conversation id as conversations"):
            mem.import_conversations(items)
        assert _state(mem) == before
