"""definable's ``Memory`` (issue 33) on every store, sync and async.

Message-granular ``add`` / ``add_many`` and ``get_entries`` with the user
filter; entries carry ``role``, ``user_id``, ``updated_at``; ``enabled=False``
reads and writes nothing and keeps the configuration; ``max_messages`` counts
messages; ``description`` reaches the agent's instructions; bad messages are
refused before anything is written.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from modes import call

from firefly_orm.compat.definable import ROLES, Memory, MessageEntry
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError
from firefly_orm.store import InMemoryStore

USER = {"role": "user", "content": "My order 1042 is late"}
ANSWER = {"role": "assistant", "content": "Let me check"}


async def test_messages_are_added_and_read_per_user(store: Any, mode: str) -> None:
    memory = Memory(store=store, max_messages=3, description="orders")
    first = await call(mode, memory, "add", USER, "s1", user_id="ada")
    assert isinstance(first, MessageEntry)
    assert (first.role, first.content, first.user_id, first.turn_id) == (
        "user",
        USER["content"],
        "ada",
        0,
    )
    assert first.updated_at == first.created_at and first.created_at.tzinfo is not None
    more = [
        ANSWER,
        {"role": "user", "content": "any news?"},
        {"role": "assistant", "content": "shipped"},
    ]
    added = await call(mode, memory, "add_many", more, "s1", user_id="ada")
    assert [e.role for e in added] == ["assistant", "user", "assistant"]

    entries = await call(mode, memory, "get_entries", "s1", user_id="ada")
    assert [(e.role, e.content) for e in entries] == [
        ("assistant", "Let me check"),
        ("user", "any news?"),
        ("assistant", "shipped"),
    ]  # max_messages=3: the oldest message evicted
    assert {e.user_id for e in entries} == {"ada"} and {e.session_id for e in entries} == {"s1"}
    assert await call(mode, memory, "get_entries", "s1", user_id="bob") == []
    assert len(await call(mode, memory, "get_entries", "s1")) == 3  # no filter
    assert await call(mode, memory, "get_entries", "missing") == []
    with pytest.raises(ConversationNotFoundError):  # bob cannot write into ada's session
        await call(mode, memory, "add", USER, "s1", user_id="bob")
    assert len(await call(mode, memory, "get_entries", "s1", user_id="ada")) == 3


async def test_disabled_memory_reads_and_writes_nothing(store: Any, mode: str) -> None:
    memory = Memory(store=store, enabled=False, max_messages=7, description="orders")
    assert await call(mode, memory, "add", USER, "s1", user_id="ada") is None
    assert await call(mode, memory, "add_many", [USER, ANSWER], "s1", user_id="ada") == []
    assert await call(mode, memory, "get_entries", "s1", user_id="ada") == []
    assert memory.instructions is None
    assert memory.manager.user_conversations("ada") == []  # nothing written

    memory.enabled = True  # the configuration was kept
    await call(mode, memory, "add", USER, "s1", user_id="ada")
    assert memory.manager.conversation.max_messages == 7
    assert memory.instructions == "Your memory: orders"
    memory.enabled = False
    assert await call(mode, memory, "get_entries", "s1", user_id="ada") == []
    memory.enabled = True
    assert len(await call(mode, memory, "get_entries", "s1", user_id="ada")) == 1


@pytest.mark.parametrize(
    "messages",
    [
        [USER, {"role": "robot", "content": "x"}],
        [USER, {"role": "user", "content": 3}],
        [USER, {"content": "no role"}],
    ],
)
def test_bad_messages_are_refused_before_anything_is_written(messages: list[Any]) -> None:
    store = InMemoryStore()
    memory = Memory(store=store)
    with pytest.raises(EntryValidationError):
        memory.add_many(messages, "s1", user_id="ada")
    assert memory.get_entries("s1") == [] and store.load("conversation:s1") == []
    with pytest.raises(TypeError):
        memory.add_many(USER, "s1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Memory(enabled="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        memory.enabled = 1  # type: ignore[assignment]
    with pytest.raises(TypeError):
        Memory(model=42)


def test_a_model_gives_a_summarizer_and_objects_with_role_and_content_are_messages() -> None:
    summaries: list[int] = []

    def summarize(turns: list[Any]) -> str:
        summaries.append(len(turns))
        return "earlier"

    class Message:
        role = "user"
        content = "as an object"

    memory = Memory(model=summarize, max_messages=2)
    for n in range(3):
        memory.add({"role": "user", "content": f"m{n}"}, "s1")
    memory.add(Message(), "s1")
    assert summaries and memory.manager.conversation.get_summary("s1") is not None
    assert [e.content for e in memory.get_entries("s1")] == ["m2", "as an object"]


# --------------------------------------------------------------------------- the agent layer

HOWS = ("run_sync", "run", "run_stream", "iter")


class Recorder:
    """A FunctionModel function: records the prompts and instructions of each call."""

    def __init__(self) -> None:
        self.prompts: list[list[str]] = []
        self.instructions: list[str | None] = []

    async def __call__(self, messages: list[Any], info: Any) -> Any:
        from pydantic_ai.messages import ModelResponse, TextPart, UserPromptPart

        self.prompts.append(
            [str(p.content) for m in messages for p in m.parts if isinstance(p, UserPromptPart)]
        )
        self.instructions.append(getattr(messages[-1], "instructions", None))
        return ModelResponse(parts=[TextPart(content="ok")])

    async def stream(self, messages: list[Any], info: Any) -> Any:
        await self(messages, info)
        yield "ok"


async def run_once(agent: Any, how: str, prompt: str, **ids: Any) -> None:
    if how == "run_sync":
        await asyncio.to_thread(agent.run_sync, prompt, **ids)
    elif how == "run":
        await agent.run(prompt, **ids)
    elif how == "run_stream":
        async with agent.run_stream(prompt, **ids) as stream:
            await stream.get_output()
    else:
        async with agent.iter(prompt, **ids) as agent_run:
            async for _node in agent_run:
                pass


@pytest.mark.parametrize("how", HOWS)
async def test_the_agent_uses_memory_only_while_it_is_on(store: Any, how: str) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    model = Recorder()
    memory = Memory(store=store, description="Remembers the user's orders.")
    agent = memory.agent(
        Agent(FunctionModel(model, stream_function=model.stream), instructions="Be brief.")
    )

    await run_once(agent, how, "order 1042", user_id="ada")
    await run_once(agent, how, "any news?", user_id="ada")
    assert model.prompts[-1] == ["order 1042", "any news?"]  # the history was read
    assert "Remembers the user's orders." in (model.instructions[-1] or "")
    assert "Be brief." in (model.instructions[-1] or "")
    (cid,) = memory.manager.user_conversations("ada")
    entries = memory.get_entries(cid, user_id="ada")  # each run's turn: prompt and answer
    assert [(e.role, e.content) for e in entries] == [
        ("user", "order 1042"),
        ("assistant", "ok"),
        ("user", "any news?"),
        ("assistant", "ok"),
    ]

    memory.enabled = False
    await run_once(agent, how, "off the record", user_id="ada")
    assert model.prompts[-1] == ["off the record"]  # no history read
    assert "Remembers" not in (model.instructions[-1] or "")
    memory.enabled = True
    assert memory.get_entries(cid, user_id="ada") == entries  # nothing written while off
    assert memory.manager.user_conversations("ada") == [cid]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(ROLES)), st.text(max_size=30)), min_size=1, max_size=6
    )
)
def test_what_is_added_reads_back_in_order(messages: list[tuple[str, str]]) -> None:
    memory = Memory(store=InMemoryStore())
    added = memory.add_many([{"role": r, "content": c} for r, c in messages], "s", user_id="u")
    entries = memory.get_entries("s", user_id="u")
    assert (
        [(e.role, e.content) for e in entries] == messages == [(e.role, e.content) for e in added]
    )
    assert [e.turn_id for e in entries] == list(range(len(messages)))
