"""The LlamaIndex chat store adapter on memory, SQLite and PostgreSQL.

llama-index-core ships no conformance suite for chat stores; these tests port
the behaviours its own chat store tests check
(``llama-index-core/tests/storage/chat_store/test_simple_chat_store.py``), each
naming the tests it ports, and add what our layers give (user binding, budgets,
lossless messages, one unit of work per write).  Written here, not copied.  Not
ported: ``test_persist_non_ascii_unescaped`` (``SimpleChatStore.persist`` writes
a JSON file; ours persists in the store: non-ASCII text is checked read back
through a reopened store instead) and ``test_sql.py`` (the ``AsyncDBChatStore``
interface of ``Memory``, which this adapter does not implement).
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers.adapter_processes import run_second_process
from helpers.llama_index_chat import chat
from llama_index.core.base.llms.types import TextBlock
from llama_index.core.llms import ChatMessage
from store_backends import OpenedBackend, backend_params

from firefly_orm import ConversationMemory
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError
from firefly_orm.integrations.llama_index import FireflyChatStore

#: Each test runs on these backends (the memory layer makes every other store the same).
on_three = pytest.mark.parametrize(
    "layer_backend", backend_params(["memory", "sqlite", "postgres"]), indirect=True
)


def user(text: str) -> ChatMessage:
    """A user message."""
    return ChatMessage(role="user", content=text)


@pytest.fixture
def memory(store: Any) -> ConversationMemory:
    """An unbounded conversation memory over the backend's store."""
    return ConversationMemory(store=store, max_tokens=None)


@on_three
def test_add_get_set_and_keys(layer_backend: OpenedBackend) -> None:
    """Ports test_add_messages (with ``idx``): messages per key in order, the keys;
    and set_messages replaces a key's messages in one unit of work; a reopened
    store (another process) reads them, non-ASCII included."""
    chat_store = FireflyChatStore(ConversationMemory(store=layer_backend.store, max_tokens=None))
    for key in ("user1", "user2"):
        chat_store.add_message(key, user("hello"))
        chat_store.add_message(key, user("world"))
    assert chat_store.get_messages("user1") == [user("hello"), user("world")]
    assert chat_store.get_messages("user2") == [user("hello"), user("world")]
    assert chat_store.get_keys() == ["user1", "user2"]
    chat_store.add_message("user1", user("hello"), idx=0)
    chat_store.add_message("user1", user("end"), idx=99)  # past the end: appended
    assert chat_store.get_messages("user1") == [user(t) for t in ["hello", "hello", "world", "end"]]
    chat_store.set_messages("user2", [user("ハロー héllo"), ChatMessage(role="assistant")])
    chat_store.set_messages("user3", [])
    again = ConversationMemory(store=layer_backend.reopen(), max_tokens=None)
    reopened = FireflyChatStore(again)
    assert reopened.get_messages("user2") == [user("ハロー héllo"), ChatMessage(role="assistant")]
    assert reopened.get_messages("user3") == [] and reopened.get_messages("nobody") == []
    assert reopened.get_keys() == ["user1", "user2", "user3"]
    assert len(again.get_turns("user2")) == 1


@on_three
def test_delete_messages_and_single_messages(memory: ConversationMemory) -> None:
    """Ports test_delete_chat_messages, test_delete_chat_message,
    test_delete_chat_message_idx, test_delete_chat_message_out_of_bounds and
    test_delete_last_chat_message_from_empty_history."""
    chat_store = FireflyChatStore(memory)
    for key in ("user1", "user2"):
        chat_store.add_message(key, user("hello"))
        chat_store.add_message(key, user("world"))
    assert chat_store.delete_messages("user1") == [user("hello"), user("world")]
    assert chat_store.get_messages("user1") == []
    assert chat_store.delete_messages("user1") is None
    assert chat_store.get_messages("user2") == [user("hello"), user("world")]
    assert chat_store.delete_last_message("user2") == user("world")
    assert chat_store.get_messages("user2") == [user("hello")]
    chat_store.add_message("user2", user("world"))
    assert chat_store.delete_message("user2", 0) == user("hello")
    assert chat_store.get_messages("user2") == [user("world")]
    assert chat_store.delete_message("user2", -2) is None
    assert chat_store.delete_message("user2", 1) is None
    assert chat_store.get_messages("user2") == [user("world")]
    assert chat_store.delete_last_message("user2") == user("world")
    assert chat_store.delete_last_message("user2") is None
    assert chat_store.delete_last_message("never") is None
    # One turn holding several messages (set_messages) is shortened, not dropped.
    chat_store.set_messages("many", [user("a"), user("b"), user("c")])
    assert chat_store.delete_message("many", 1) == user("b")
    chat_store.add_message("many", user("x"), idx=1)
    assert chat_store.get_messages("many") == [user("a"), user("x"), user("c")]
    turn = memory.get_turns("many")[0]
    assert turn.user_prompt == "a\nx\nc"


@on_three
async def test_async_twins_and_lossless_messages(memory: ConversationMemory) -> None:
    """The async twins; tool calls, blocks and kwargs come back equal (ours)."""
    chat_store = FireflyChatStore(memory)
    messages = [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", blocks=[TextBlock(text="weather in"), TextBlock(text="Oslo?")]),
        ChatMessage(
            role="assistant",
            content="",
            additional_kwargs={"tool_calls": [{"id": "c1", "function": {"name": "weather"}}]},
        ),
        ChatMessage(role="tool", content="-3.5 °C", additional_kwargs={"tool_call_id": "c1"}),
        ChatMessage(role="assistant", content="Cold: -3.5 °C. 🧊"),
    ]
    await chat_store.aset_messages("k", messages[:2])
    for message in messages[2:]:
        await chat_store.async_add_message("k", message)
    assert await chat_store.aget_messages("k") == messages
    assert chat_store.get_messages("k") == messages
    assert await chat_store.aget_keys() == ["k"]
    turns = await memory.async_get_turns("k")
    assert (turns[0].user_prompt, turns[-1].assistant_response) == (
        "Be brief.\nweather in\nOslo?",
        "Cold: -3.5 °C. 🧊",
    )
    assert turns[2].user_prompt == turns[2].assistant_response == ""  # a tool result: neither
    assert await chat_store.adelete_message("k", 1) == messages[1]
    await chat_store.async_add_message("k", messages[1], idx=1)
    assert await chat_store.adelete_last_message("k") == messages[-1]
    assert await chat_store.adelete_messages("k") == messages[:-1]
    assert await chat_store.aget_messages("k") == []


@on_three
async def test_a_bound_store_never_touches_another_users(store: Any) -> None:
    """A memory bound to a user: another user's key reads as empty, deletes leave it
    alone, writes are refused, get_keys lists the user's own (ours)."""
    alice = FireflyChatStore(ConversationMemory(store=store, max_tokens=None, user_id="alice"))
    bob = FireflyChatStore(ConversationMemory(store=store, max_tokens=None, user_id="bob"))
    alice.add_message("shared", user("alice's secret"))
    await bob.async_add_message("bobs", user("mine"))
    assert bob.get_messages("shared") == [] and await bob.aget_messages("shared") == []
    assert bob.delete_messages("shared") is None and bob.delete_last_message("shared") is None
    assert await bob.adelete_message("shared", 0) is None
    with pytest.raises(ConversationNotFoundError):
        bob.add_message("shared", user("mine now"))
    with pytest.raises(ConversationNotFoundError):
        await bob.aset_messages("shared", [user("mine now")])
    assert alice.get_messages("shared") == [user("alice's secret")]
    assert alice.get_keys() == ["shared"] and await bob.aget_keys() == ["bobs"]


@pytest.mark.parametrize("layer_backend", backend_params(["memory"]), indirect=True)
def test_budget_and_bad_input(store: Any) -> None:
    """The memory's budget evicts the oldest messages; bad input: a clear error,
    nothing written (ours)."""
    chat_store = FireflyChatStore(ConversationMemory(store=store, max_tokens=None, max_messages=2))
    for i in range(4):
        chat_store.add_message("k", user(f"m{i}"))
    assert [m.content for m in chat_store.get_messages("k")] == ["m2", "m3"]
    with pytest.raises(TypeError):
        FireflyChatStore(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        chat_store.add_message("k", {"role": "user"})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        chat_store.set_messages("k", [user("ok"), "no"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        chat_store.delete_message("k", "0")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        chat_store.add_message("k", ChatMessage(role="user", additional_kwargs={"x": object()}))
    with pytest.raises(EntryValidationError):
        chat_store.add_message("", user("x"))
    assert [m.content for m in chat_store.get_messages("k")] == ["m2", "m3"]
    assert chat_store.get_keys() == ["k"] and "FireflyChatStore" in repr(chat_store)


@pytest.mark.parametrize("layer_backend", backend_params(["sqlite", "postgres"]), indirect=True)
async def test_chat_engine_resumes_in_a_second_process(
    layer_backend: OpenedBackend, memory: ConversationMemory
) -> None:
    """``SimpleChatEngine`` with ``MockLLM`` (it answers with its prompt) and a
    ``ChatMemoryBuffer`` on the store: the second turn, in another process on
    SQLite (through a reopened store on PostgreSQL, to keep the suite's time),
    sends the model the first turn (ours; the end-to-end check issue 31 asks for)."""
    first = await chat(memory, "chat-1", "My name is Ada.")
    assert first == "user: My name is Ada.\nassistant: "
    if layer_backend.name == "sqlite":
        second = run_second_process("llama_index_chat", layer_backend, "chat-1", "What is my name?")
    else:
        again = ConversationMemory(store=layer_backend.reopen(), max_tokens=None)
        second = (await chat(again, "chat-1", "What is my name?")).strip()
    assert second.startswith("user: My name is Ada.\nassistant: user: My name is Ada.")
    assert second.endswith("user: What is my name?\nassistant:")  # stdout is stripped
    messages = await FireflyChatStore(memory).aget_messages("chat-1")
    assert [m.role.value for m in messages] == ["user", "assistant", "user", "assistant"]
