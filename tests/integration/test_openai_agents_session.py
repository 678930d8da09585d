"""The OpenAI Agents SDK session adapter: the SDK's session behaviours on memory, SQLite, PG.

The OpenAI Agents SDK ships no conformance suite for its ``Session`` protocol;
these tests port the behaviours its own session tests check (openai-agents-python,
``tests/memory/test_session.py`` and ``tests/extensions/memory/test_sqlalchemy_session.py``),
each test naming the upstream tests it ports, and add what our layers give
(user binding, budgets, lossless JSON).  Written here, not copied.
"""

from __future__ import annotations

from typing import Any

import pytest
from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings
from helpers.adapter_processes import run_second_process
from helpers.openai_agents_echo import run_turn, user_texts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import OpenedBackend, backend_params

from firefly_orm import ConversationMemory
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError
from firefly_orm.integrations.openai_agents import FireflySession

THREE = backend_params(["memory", "sqlite", "postgres"])

#: Each test runs on these backends (the memory layer makes every other store the same).
on_three = pytest.mark.parametrize("layer_backend", THREE, indirect=True)


def items_of(*contents: str) -> list[TResponseInputItem]:
    """Alternating user / assistant messages with these contents."""
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": c} for i, c in enumerate(contents)]  # type: ignore[misc]


def contents(items: list[TResponseInputItem]) -> list[Any]:
    """The ``content`` of each item."""
    return [dict(i).get("content") for i in items]


@pytest.fixture
def memory(store: Any) -> ConversationMemory:
    """An unbounded conversation memory over the backend's store."""
    return ConversationMemory(store=store, max_tokens=None)


@on_three
async def test_direct_operations(memory: ConversationMemory) -> None:
    """Ports test_sqlalchemy_session_direct_ops and test_sqlite_session_memory_direct:
    add, get, pop the newest, clear."""
    session = FireflySession("direct_ops_test", memory)
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    await session.add_items(items_of("Hello", "Hi there!"))
    assert contents(await session.get_items()) == ["Hello", "Hi there!"]
    popped = await session.pop_item()
    assert popped is not None and dict(popped)["content"] == "Hi there!"
    assert contents(await session.get_items()) == ["Hello"]
    await session.clear_session()
    assert await session.get_items() == []


@on_three
async def test_get_items_with_limit(memory: ConversationMemory) -> None:
    """Ports test_sqlite_session_get_items_with_limit and test_get_items_with_limit
    (SQLAlchemy): the newest N in order, all for more than there are, none for 0;
    across several add_items calls (turns) too."""
    session = FireflySession("count_test", memory)
    await session.add_items(items_of("Message 1", "Response 1", "Message 2"))
    await session.add_items([{"role": "assistant", "content": "Response 2"}])
    await session.add_items(items_of("Message 3", "Response 3"))
    everything = ["Message 1", "Response 1", "Message 2", "Response 2", "Message 3", "Response 3"]
    assert contents(await session.get_items()) == everything
    assert contents(await session.get_items(limit=2)) == everything[-2:]
    assert contents(await session.get_items(limit=4)) == everything[-4:]
    assert contents(await session.get_items(limit=10)) == everything
    assert await session.get_items(limit=0) == []
    with pytest.raises(EntryValidationError):
        await session.get_items(limit=-1)


@on_three
async def test_pop_item(memory: ConversationMemory) -> None:
    """Ports test_sqlite_session_memory_pop_item and test_pop_from_empty_session:
    newest first, down to an empty session, then ``None``."""
    session = FireflySession("pop_test", memory)
    assert await session.pop_item() is None
    await session.add_items(items_of("Hello", "Hi there!"))
    await session.add_items([{"role": "user", "content": "How are you?"}])
    popped = [await session.pop_item() for _ in range(4)]
    assert [None if p is None else (dict(p)["role"], dict(p)["content"]) for p in popped] == [
        ("user", "How are you?"),
        ("assistant", "Hi there!"),
        ("user", "Hello"),
        None,
    ]
    assert await session.get_items() == []
    assert await memory.async_get_turns("pop_test") == []  # emptied turns are deleted


@on_three
async def test_sessions_are_isolated(memory: ConversationMemory) -> None:
    """Ports test_session_memory_pop_different_sessions and test_session_isolation:
    pop and clear touch their own session only."""
    one, two = FireflySession("session_1", memory), FireflySession("session_2", memory)
    await one.add_items(items_of("I like cats."))
    await two.add_items(items_of("I like dogs.", "Dogs it is."))
    popped = await one.pop_item()
    assert popped is not None and dict(popped)["content"] == "I like cats."
    assert await one.get_items() == []
    assert contents(await two.get_items()) == ["I like dogs.", "Dogs it is."]
    await two.add_items(items_of("x"))
    await one.clear_session()
    assert len(await two.get_items()) == 3


@on_three
async def test_add_empty_items_list(memory: ConversationMemory) -> None:
    """Ports test_add_empty_items_list: adding ``[]`` writes nothing."""
    session = FireflySession("add_empty_test", memory)
    await session.add_items([])
    assert await session.get_items() == []
    assert "add_empty_test" not in await memory.async_conversation_ids()


@on_three
async def test_unicode_and_sql_text_round_trip(memory: ConversationMemory) -> None:
    """Ports test_sqlite_session_unicode_content,
    test_sqlite_session_special_characters_and_sql_injection and the non-ASCII
    round trips (test_sqlalchemy_session_*_non_ascii_*): items come back equal."""
    session = FireflySession("special_chars_test", memory)
    items = items_of(
        "こんにちは",
        "😊👍",
        "Привет café",
        "O'Reilly",
        "DROP TABLE sessions;",
        '"SELECT * FROM users WHERE name = "admin";"',
        "Robert'); DROP TABLE students;--",
    )
    await session.add_items(items)
    assert await session.get_items() == items


@on_three
async def test_session_settings_limit(memory: ConversationMemory) -> None:
    """Ports test_get_items_uses_session_settings_limit and
    test_get_items_explicit_limit_overrides_session_settings."""
    session = FireflySession(
        "settings_limit_test", memory, session_settings=SessionSettings(limit=3)
    )
    await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(10)])
    assert contents(await session.get_items()) == ["Message 7", "Message 8", "Message 9"]
    assert contents(await session.get_items(limit=2)) == ["Message 8", "Message 9"]


@on_three
async def test_sdk_items_are_stored_losslessly(memory: ConversationMemory) -> None:
    """Tool calls, their outputs and reasoning items come back equal (ours)."""
    items: list[Any] = [
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "weather",
            "arguments": '{"city": "Oslo"}',
            "id": "fc_1",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "-3.5 °C"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "ok"}]},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Cold.", "annotations": []}],
        },
    ]
    session = FireflySession("lossless", memory)
    await session.add_items(items)
    assert await session.get_items() == items
    turn = (await memory.async_get_turns("lossless"))[0]
    assert (turn.user_prompt, turn.assistant_response) == ("weather?", "Cold.")
    assert await session.pop_item() == items[-1]
    assert await session.get_items() == items[:-1]


@on_three
async def test_runner_resumes_in_a_second_process(
    layer_backend: OpenedBackend, memory: ConversationMemory
) -> None:
    """Ports test_runner_integration / test_session_memory_basic_functionality: a
    real ``agents.Agent`` run (a scripted model, no network) whose second turn
    sees the first; on SQLite and PostgreSQL the second turn runs in another process."""
    session = FireflySession("runner_integration_test", memory)
    assert await run_turn(session, "Golden Gate Bridge?") == "heard: Golden Gate Bridge?"
    if layer_backend.name == "memory":
        answer = await run_turn(session, "Which state?")
    else:
        answer = run_second_process(
            "openai_agents_echo", layer_backend, "runner_integration_test", "Which state?"
        )
    assert answer == "heard: Golden Gate Bridge? | Which state?"
    items = await session.get_items()
    assert user_texts(items) == ["Golden Gate Bridge?", "Which state?"]
    assert len(items) == 4  # two prompts, two answers


@on_three
async def test_a_bound_session_never_reads_another_users(store: Any) -> None:
    """A memory bound to a user: another user's conversation reads as empty,
    pop and clear leave it alone, writes are refused (ours)."""
    alice = ConversationMemory(store=store, max_tokens=None, user_id="alice")
    bob = ConversationMemory(store=store, max_tokens=None, user_id="bob")
    await FireflySession("shared-id", alice).add_items(items_of("alice's secret"))
    intruder = FireflySession("shared-id", bob)
    assert await intruder.get_items() == []
    assert await intruder.get_items(limit=1) == []
    assert await intruder.pop_item() is None
    await intruder.clear_session()
    with pytest.raises(ConversationNotFoundError):
        await intruder.add_items(items_of("mine now"))
    assert contents(await FireflySession("shared-id", alice).get_items()) == ["alice's secret"]


@on_three
async def test_budget_and_bad_input(store: Any) -> None:
    """The memory's budget evicts the oldest items; bad input is refused, nothing written."""
    memory = ConversationMemory(store=store, max_tokens=None, max_messages=3)
    session = FireflySession("budget", memory)
    await session.add_items(items_of("one", "two"))
    await session.add_items(items_of("three", "four"))
    assert contents(await session.get_items()) == ["three", "four"]
    with pytest.raises(TypeError):
        await session.add_items([{"role": "user", "content": object()}])  # type: ignore[misc,list-item]
    assert contents(await session.get_items()) == ["three", "four"]
    with pytest.raises(EntryValidationError):
        FireflySession("", memory)
    with pytest.raises(TypeError):
        FireflySession("s", store)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@pytest.mark.parametrize("layer_backend", backend_params(["memory"]), indirect=True)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.lists(st.dictionaries(st.text(max_size=6), _JSON, max_size=4), min_size=1, max_size=3),
        min_size=1,
        max_size=3,
    )
)
async def test_any_json_items_round_trip(
    memory: ConversationMemory, batches: list[list[Any]]
) -> None:
    """Any JSON object items come back equal, whatever the batches (ours)."""
    session = FireflySession("fuzz", memory)
    await session.clear_session()
    for batch in batches:
        await session.add_items(batch)
    flat = [item for batch in batches for item in batch]
    assert await session.get_items() == flat
    assert await session.pop_item() == flat[-1]
