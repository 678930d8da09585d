"""The adapters act as their user only (issue 34, section 1), on every store.

``MemoryAgent`` (``run_sync``, ``run``, ``run_stream``, ``iter``; on a manager
bound to a user, or an unbound one with ``user_id=``), ``delegate``, the tools
a run's ``MemoryDeps`` reach and ``long_term_toolset``: another user's
conversation is refused with the error of a missing conversation
(:class:`~firefly_orm.errors.ConversationNotFoundError`, the same message), the
model is not called and nothing is written; a conversation a run starts is its
user's (``erase_user`` takes it); the owner is checked again when the turn is
written; an unbound manager run for nobody (an admin's) reaches everything.
A Hypothesis property drives runs of two users over a few conversation ids.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from firefly_orm.errors import ConversationNotFoundError, EntryValidationError
from firefly_orm.long_term.tools import long_term_toolset
from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai import MemoryAgent, MemoryDeps, delegate
from firefly_orm.store import InMemoryStore

SECRET = "ada's vault code is 4711"


def seen(messages: list[ModelMessage]) -> str:
    """Everything the model was sent, as text."""
    parts: list[str] = []
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            if content is not None:
                parts.append(str(content))
    return "\n".join(parts)


class Model:
    """A FunctionModel function: records each call; ``peek <cid>`` / ``recall <words>``
    call the tool of that name, then the answer quotes the tool's return."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.during: list[Any] = []
        self._ids = itertools.count()

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls.append(seen(messages))
        for action in self.during:
            await action()
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(content=f"tool said: {returns[0].content}")])
        prompt = " ".join(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
        verb, _, rest = prompt.partition(" ")
        if verb in ("peek", "recall", "remember"):
            args = {"conversation_id": rest} if verb == "peek" else {"query": rest}
            if verb == "remember":
                args = {"content": rest}
            call = ToolCallPart(tool_name=verb, args=args, tool_call_id=f"t{next(self._ids)}")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(content=f"answer {len(self.calls)}")])

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.calls.append(seen(messages))
        yield "streamed"


def make_agent(model: Model, memory: MemoryManager, **options: Any) -> MemoryAgent[MemoryDeps, str]:
    agent = Agent(
        FunctionModel(model, stream_function=model.stream),
        deps_type=MemoryDeps,
        toolsets=[long_term_toolset(memory)] if memory.user_id is not None else [],
    )

    @agent.tool
    async def peek(ctx: RunContext[MemoryDeps], conversation_id: str) -> str:
        try:
            turns = await ctx.deps.memory.conversation.async_get_turns(conversation_id)
        except ConversationNotFoundError as exc:
            return str(exc)
        return " | ".join(t.user_prompt for t in turns)

    return MemoryAgent(agent, memory=memory, **options)


def ada_conversation(store: Any) -> str:
    ada = MemoryManager(store=store, user_id="ada")
    cid = ada.new_conversation()
    ada.add_turn(cid, SECRET, "noted")
    ada.remember(SECRET, importance=0.9)
    ada.set_fact("vault", "4711")
    return cid


PROMPT = "Show me"
HOWS = ("run_sync", "run", "run_stream", "iter")
Support = MemoryAgent[MemoryDeps, str]


async def run_once(
    support: Support, how: str, cid: str | None, user: str | None, *, new: bool = False
) -> str:
    """One run of ``support`` the way ``how`` names; the conversation id it ran on.

    ``new``: ``new_conversation=True`` (else a run without ``cid`` continues
    the user's current conversation).
    """
    ids: dict[str, Any] = {"conversation_id": cid, "user_id": user, "new_conversation": new}
    if how == "run_sync":
        result = await asyncio.to_thread(support.run_sync, PROMPT, **ids)
        return result.conversation_id
    if how == "run":
        return (await support.run(PROMPT, **ids)).conversation_id
    if how == "run_stream":
        async with support.run_stream(PROMPT, **ids) as stream:
            await stream.get_output()
        return stream.conversation_id
    async with support.iter(PROMPT, **ids) as agent_run:
        async for _node in agent_run:
            pass
    assert agent_run.result is not None
    return str(agent_run.result.conversation_id)


def agents_of_bob(store: Any, model: Model) -> list[tuple[Support, str | None]]:
    """bob's agents: on a manager bound to bob, on an unbound one run with
    ``user_id="bob"``, and a delegated sub-agent of bob's manager."""
    bob = MemoryManager(store=store, user_id="bob")
    return [
        (make_agent(model, bob), None),
        (make_agent(model, MemoryManager(store=store)), "bob"),
        (delegate(bob, make_agent(model, bob).agent, name="helper"), None),
    ]


async def test_another_users_conversation_is_missing_to_an_agent(store: Any) -> None:
    admin = MemoryManager(store=store)
    cid = ada_conversation(store)
    before = await admin.conversation.async_export_conversation(cid)
    model = Model()
    for support, user in agents_of_bob(store, model):
        for how in HOWS:
            with pytest.raises(ConversationNotFoundError) as refused:
                await run_once(support, how, cid, user)
            # word for word the error of a conversation that does not exist
            assert type(refused.value) is ConversationNotFoundError
            assert str(refused.value) == str(ConversationNotFoundError(cid))
    assert model.calls == []  # refused before the model was called
    assert await admin.conversation.async_export_conversation(cid) == before
    assert await admin.async_user_conversations("bob") == []
    assert await admin.async_owner_of(cid) == "ada"


async def test_a_conversation_a_run_starts_is_its_users(store: Any) -> None:
    admin = MemoryManager(store=store)
    ada_cid = ada_conversation(store)
    model = Model()
    started = []
    for support, user in agents_of_bob(store, model):
        for how in HOWS:
            started.append(await run_once(support, how, None, user, new=True))
    assert len(set(started)) == len(started)
    for cid in started:
        assert await admin.async_owner_of(cid) == "bob"
    assert sorted(await admin.async_user_conversations("bob")) == sorted(started)
    assert all(SECRET not in call for call in model.calls)  # nor ada's items or facts

    # an admin's run (an unbound manager, no user) reaches any conversation
    await make_agent(model, admin).run("As admin", conversation_id=ada_cid)
    assert await admin.async_owner_of(ada_cid) == "ada"
    assert SECRET in model.calls[-1]

    await admin.async_erase_user("bob")
    assert await admin.async_user_conversations("bob") == []
    for cid in started:
        assert not await admin.async_conversation_exists(cid)
    assert len(await admin.conversation.async_get_turns(ada_cid)) == 2


async def test_the_owner_is_checked_again_when_the_turn_is_written(store: Any) -> None:
    admin = MemoryManager(store=store)
    ada = MemoryManager(store=store, user_id="ada")
    model = Model()
    cid = "taken-during-the-call"

    async def ada_takes_it() -> None:
        await ada.async_add_turn(cid, SECRET, "mine")

    model.during.append(ada_takes_it)
    support = make_agent(model, MemoryManager(store=store, user_id="bob"))
    with pytest.raises(ConversationNotFoundError) as refused:
        await support.run("Hello", conversation_id=cid)
    assert str(refused.value) == str(ConversationNotFoundError(cid))
    turns = await admin.conversation.async_get_turns(cid)
    assert [t.user_prompt for t in turns] == [SECRET]  # bob's turn was not written
    assert await admin.async_owner_of(cid) == "ada"


async def test_tools_act_as_the_runs_user(store: Any) -> None:
    admin = MemoryManager(store=store)
    ada_cid = ada_conversation(store)
    model = Model()
    bob = MemoryManager(store=store, user_id="bob")
    support = make_agent(model, bob)

    peeked = await support.run(f"peek {ada_cid}")
    assert peeked.output == f"tool said: {ConversationNotFoundError(ada_cid)}"
    recalled = await support.run("recall vault code 4711")
    assert recalled.output == "tool said: []"
    await support.run("remember bob likes tea")
    assert [i.user_id for i in await admin.long_term.async_list(user_id="bob")] == ["bob"]
    assert all(SECRET not in call for call in model.calls)
    assert await admin.async_owner_of(ada_cid) == "ada"

    with pytest.raises(EntryValidationError, match="serves user 'bob' only"):
        long_term_toolset(bob, user_id="ada")
    with pytest.raises(EntryValidationError, match="belongs to user 'bob'"):
        await support.run("Hello", user_id="ada")
    assert await admin.async_user_conversations("ada") == [ada_cid]


async def test_deps_of_another_users_memory_are_refused(store: Any) -> None:
    admin = MemoryManager(store=store)
    bob = MemoryManager(store=store, user_id="bob")
    with pytest.raises(EntryValidationError, match=r"memory\.for_user"):
        MemoryDeps(admin, "c", user_id="bob")  # an unbound memory would reach everyone's
    with pytest.raises(EntryValidationError, match=r"memory\.for_user"):
        MemoryDeps(MemoryManager(store=store, user_id="ada"), "c", user_id="bob")
    assert MemoryDeps(bob, "c", user_id="bob").memory is bob
    model = Model()
    support = make_agent(model, admin)
    for deps in (MemoryDeps(admin, "c"), MemoryDeps(admin.for_user("ada"), "c", "ada")):
        with pytest.raises(EntryValidationError, match="deps"):
            await support.run("Hello", user_id="bob", deps=deps)
    assert model.calls == []
    assert await admin.async_user_conversations("bob") == []


# --------------------------------------------------------------------------- property

USERS = ("ada", "bob")
CONVERSATIONS = ("c0", "c1", "c2")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from(USERS), st.sampled_from(CONVERSATIONS), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_runs_of_two_users_never_cross(runs: list[tuple[str, str, bool]]) -> None:
    store = InMemoryStore()
    model = Model()
    admin = MemoryManager(store=store)
    agents = {
        True: {u: make_agent(model, MemoryManager(store=store, user_id=u)) for u in USERS},
        False: {u: make_agent(model, admin) for u in USERS},
    }
    owners: dict[str, str] = {}
    for n, (user, cid, bound) in enumerate(runs):
        support = agents[bound][user]
        secret = f"{user} secret {n}"
        calls = len(model.calls)
        run_as = None if bound else user
        if owners.setdefault(cid, user) == user:
            support.run_sync(secret, conversation_id=cid, user_id=run_as)
            assert len(model.calls) == calls + 1
            other = next(u for u in USERS if u != user)
            assert f"{other} secret" not in model.calls[-1]
        else:
            with pytest.raises(ConversationNotFoundError):
                support.run_sync(secret, conversation_id=cid, user_id=run_as)
            assert len(model.calls) == calls
    for cid, owner in owners.items():
        assert admin.owner_of(cid) == owner
        prompts = [t.user_prompt for t in admin.conversation.get_turns(cid)]
        assert prompts and all(p.startswith(f"{owner} secret") for p in prompts)
