"""The LangChain chat history adapter on memory, SQLite and PostgreSQL.

``langchain-tests`` has no standard tests for chat message histories, so these
tests port the behaviours langchain-core's own tests check for chat histories
(``libs/core/tests/unit_tests/chat_history/test_chat_history.py`` and
``test_file_chat_message_history.py``), each naming the tests it ports, and add
what our layers give (user binding, budgets, lossless messages).  Written here,
not copied.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers.adapter_processes import run_second_process
from helpers.langchain_history_chat import chat
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from store_backends import OpenedBackend, backend_params

from firefly_orm import ConversationMemory
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError
from firefly_orm.integrations.langchain import FireflyChatMessageHistory

#: Each test runs on these backends (the memory layer makes every other store the same).
on_three = pytest.mark.parametrize(
    "layer_backend", backend_params(["memory", "sqlite", "postgres"]), indirect=True
)


@pytest.fixture
def memory(store: Any) -> ConversationMemory:
    """An unbounded conversation memory over the backend's store."""
    return ConversationMemory(store=store, max_tokens=None)


@on_three
def test_add_and_read_messages(memory: ConversationMemory) -> None:
    """Ports test_add_messages (file history), test_add_message_implementation_only
    and test_bulk_message_implementation_only: one message or several, in order."""
    history = FireflyChatMessageHistory("s1", memory)
    history.add_user_message("Hello!")
    history.add_ai_message("Hi there!")
    history.add_message(HumanMessage("World"))
    history.add_messages([HumanMessage("Hello"), AIMessage("World")])
    messages = history.messages
    assert [type(m) for m in messages] == [
        HumanMessage,
        AIMessage,
        HumanMessage,
        HumanMessage,
        AIMessage,
    ]
    assert [m.content for m in messages] == ["Hello!", "Hi there!", "World", "Hello", "World"]
    assert len(memory.get_turns("s1")) == 4  # one turn per call


@on_three
def test_clear_messages(memory: ConversationMemory) -> None:
    """Ports test_clear_messages (file history): clear empties the session only."""
    history, other = (
        FireflyChatMessageHistory("s1", memory),
        FireflyChatMessageHistory("s2", memory),
    )
    history.add_messages([HumanMessage("Hello!"), AIMessage("Hi there!")])
    other.add_user_message("kept")
    history.clear()
    assert history.messages == []
    assert [m.content for m in other.messages] == ["kept"]


@on_three
def test_a_new_history_object_resumes(layer_backend: OpenedBackend) -> None:
    """Ports test_multiple_sessions (file history): a new history over the same
    data (a reopened store) sees every message."""
    said = ["Hello, AI!", "Hello, how can I help you?", "Tell me a joke.", "Why? To cross."]
    first = FireflyChatMessageHistory("s", ConversationMemory(store=layer_backend.store))
    for i, text in enumerate(said):
        (first.add_user_message if i % 2 == 0 else first.add_ai_message)(text)
    again = ConversationMemory(store=layer_backend.reopen(), max_tokens=None)
    assert [m.content for m in FireflyChatMessageHistory("s", again).messages] == said


@on_three
async def test_async_interface(memory: ConversationMemory) -> None:
    """Ports test_async_interface: aadd_messages, aget_messages, aclear."""
    history = FireflyChatMessageHistory("s", memory)
    await history.aadd_messages([HumanMessage("Hello"), HumanMessage("World")])
    assert await history.aget_messages() == [HumanMessage("Hello"), HumanMessage("World")]
    await history.aadd_messages([HumanMessage("!")])
    assert await history.aget_messages() == [
        HumanMessage("Hello"),
        HumanMessage("World"),
        HumanMessage("!"),
    ]
    await history.aclear()
    assert await history.aget_messages() == []


@on_three
async def test_messages_are_stored_losslessly(memory: ConversationMemory) -> None:
    """Tool calls, tool results, ids, metadata and content blocks come back equal (ours)."""
    messages: list[BaseMessage] = [
        SystemMessage("Be brief.", id="sys-1"),
        HumanMessage([{"type": "text", "text": "weather in Oslo?"}], name="ada"),
        AIMessage(
            "",
            tool_calls=[{"name": "weather", "args": {"city": "Oslo"}, "id": "call_1"}],
            response_metadata={"model": "fake", "tokens": 12},
        ),
        ToolMessage("-3.5 °C", tool_call_id="call_1"),
        AIMessage("Cold: -3.5 °C. 🧊", additional_kwargs={"refusal": None}),
    ]
    history = FireflyChatMessageHistory("lossless", memory)
    await history.aadd_messages(messages)
    assert await history.aget_messages() == messages
    assert history.messages == messages
    turn = (await memory.async_get_turns("lossless"))[0]
    assert (turn.user_prompt, turn.assistant_response) == (
        "Be brief.\nweather in Oslo?",
        "\nCold: -3.5 °C. 🧊",
    )


@on_three
@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
async def test_runnable_with_history_resumes_in_a_second_process(
    layer_backend: OpenedBackend, memory: ConversationMemory
) -> None:
    """``RunnableWithMessageHistory`` with langchain-core's ``FakeListChatModel``:
    the second turn (another process on SQLite and PostgreSQL) sends the model
    the first turn's messages (ours; the end-to-end check issue 31 asks for)."""
    first = await chat(memory, "chat-1", "My name is Ada.", "Hello Ada.")
    assert first == ["Be brief.", "My name is Ada."]
    if layer_backend.name == "memory":
        second = await chat(memory, "chat-1", "What is my name?", "Ada.")
    else:
        printed = run_second_process(
            "langchain_history_chat", layer_backend, "chat-1", "What is my name?", "Ada."
        )
        second = json.loads(printed)
    assert second == ["Be brief.", "My name is Ada.", "Hello Ada.", "What is my name?"]
    history = FireflyChatMessageHistory("chat-1", memory)
    assert [m.content for m in await history.aget_messages()] == [
        "My name is Ada.",
        "Hello Ada.",
        "What is my name?",
        "Ada.",
    ]


@on_three
def test_a_bound_history_never_reads_another_users(store: Any) -> None:
    """A memory bound to a user: another user's conversation reads as empty,
    clear leaves it alone, writes are refused, nothing written (ours)."""
    alice = ConversationMemory(store=store, max_tokens=None, user_id="alice")
    bob = ConversationMemory(store=store, max_tokens=None, user_id="bob")
    FireflyChatMessageHistory("shared-id", alice).add_user_message("alice's secret")
    intruder = FireflyChatMessageHistory("shared-id", bob)
    assert intruder.messages == []
    intruder.clear()
    with pytest.raises(ConversationNotFoundError):
        intruder.add_user_message("mine now")
    mine = FireflyChatMessageHistory("shared-id", alice).messages
    assert [m.content for m in mine] == ["alice's secret"]


@on_three
async def test_async_bound_history_and_budget(store: Any) -> None:
    """The async twins keep the user binding; the memory's budget evicts (ours)."""
    alice = ConversationMemory(store=store, max_tokens=None, max_messages=3, user_id="alice")
    bob = ConversationMemory(store=store, max_tokens=None, user_id="bob")
    mine = FireflyChatMessageHistory("a", alice)
    await mine.aadd_messages([HumanMessage("one"), AIMessage("two")])
    await mine.aadd_messages([HumanMessage("three"), AIMessage("four")])
    assert [m.content for m in await mine.aget_messages()] == ["three", "four"]
    intruder = FireflyChatMessageHistory("a", bob)
    assert await intruder.aget_messages() == []
    await intruder.aclear()
    with pytest.raises(ConversationNotFoundError):
        await intruder.aadd_messages([HumanMessage("x")])
    assert len(await mine.aget_messages()) == 2


@pytest.mark.parametrize("layer_backend", backend_params(["memory"]), indirect=True)
def test_bad_input_is_refused(memory: ConversationMemory) -> None:
    """A bad session id, memory or message: a clear error, nothing written (ours)."""
    with pytest.raises(EntryValidationError):
        FireflyChatMessageHistory("", memory)
    with pytest.raises(TypeError):
        FireflyChatMessageHistory("s", object())  # type: ignore[arg-type]
    history = FireflyChatMessageHistory("s", memory)
    with pytest.raises(TypeError):
        history.add_messages(["not a message"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        history.add_messages([HumanMessage("x", additional_kwargs={"blob": object()})])
    history.add_messages([])
    assert history.messages == []
    assert memory.conversation_ids == []
