"""MemoryAgent and scoped state (issue 32): a run's ``state_delta=`` and what its tools stage
with ``ctx.deps.stage_state`` are written with the run's turn, in its unit of work; a run
that stores no turn writes no state.  SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from knowledge_stores import SQL_KINDS, open_sql_store

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from firefly_orm.errors import EntryValidationError
from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai import MemoryAgent, MemoryDeps
from firefly_orm.sql import SQLAlchemyStore, SQLiteStore

#: What the ``choose_plan`` tool saw staged when it ran (a test's list).
Seen = list[dict[str, Any]]


@pytest.fixture(params=SQL_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLAlchemyStore]:
    yield from open_sql_store(request, tmp_path)


def calls(tool: str, *, then_fail: bool = False) -> FunctionModel:
    """A model that calls ``tool`` (no arguments), then answers (or raises: ``then_fail``)."""

    def answered(messages: list[ModelMessage]) -> bool:
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            if then_fail:
                raise RuntimeError("the model went away")
            return True
        return False

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if answered(messages):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(tool, {})])

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        if answered(messages):
            yield "done"
        else:
            yield {0: DeltaToolCall(name=tool, json_args="{}")}

    return FunctionModel(answer, stream_function=stream)


def make_agent(seen: Seen) -> Agent[MemoryDeps, str]:
    agent = Agent(calls("choose_plan"), deps_type=MemoryDeps)

    @agent.tool
    def choose_plan(ctx: RunContext[MemoryDeps]) -> str:
        seen.append(ctx.deps.staged_state)
        ctx.deps.stage_state({"plan": "annual", "app:release": 3, "temp:step": 1})
        return "chosen"

    @agent.tool
    def stage_then_explode(ctx: RunContext[MemoryDeps]) -> str:
        ctx.deps.stage_state({"plan": "broken", "user:tier": "none"})
        raise RuntimeError("the tool broke")

    return agent


def test_state_and_turn_commit_together_in_every_run_form(store: SQLAlchemyStore) -> None:
    """``state_delta=`` then the tools' staged keys (a later value wins), with the turn;
    ``temp:`` keys reach the tools, never the store; run_sync, run, run_stream, iter.
    Then a run that stores no turn writes no state (one store: one schema to set up)."""
    seen: Seen = []
    support = MemoryAgent(make_agent(seen), memory=MemoryManager(store=store))
    mgr = support.memory.for_user("ada")
    result = support.run_sync(
        "Hi", user_id="ada", state_delta={"user:tier": "gold", "plan": "monthly", "temp:lang": "de"}
    )
    cid = result.conversation_id
    # The tool saw the caller's delta (temp: keys too); its "plan" wins.
    assert seen == [{"user:tier": "gold", "plan": "monthly", "temp:lang": "de"}]
    assert mgr.get_state(cid) == {"user:tier": "gold", "plan": "annual", "app:release": 3}
    assert [t.turn_id for t in mgr.conversation.get_turns(cid)] == [0]

    async def the_async_forms() -> None:
        await support.run("Again", user_id="ada", state_delta={"count": 1})
        async with support.run_stream("Stream", user_id="ada", state_delta={"count": 2}) as s:
            await s.get_output()
        async with support.iter("Iter", user_id="ada", state_delta={"count": 3}) as agent_run:
            async for _node in agent_run:
                pass
        # Each run starts from its own delta only: nothing staged leaks into the next run.
        assert seen[1:] == [{"count": 1}, {"count": 2}, {"count": 3}]

    asyncio.run(the_async_forms())
    state = mgr.get_state(cid)
    assert state["count"] == 3 and state["plan"] == "annual"
    assert len(mgr.conversation.get_turns(cid)) == 4
    a_run_that_stores_no_turn_writes_no_state(store)


def a_run_that_stores_no_turn_writes_no_state(store: SQLAlchemyStore) -> None:
    """A tool that raises after staging, a model that fails after the tool staged, a stream
    left unread: no turn, no state (app:, user: and own keys alike)."""
    seen: Seen = []
    support = MemoryAgent(make_agent(seen), memory=MemoryManager(store=store, user_id="bob"))
    mgr = support.memory
    cid = support.run_sync("Start", state_delta={"step": 1}).conversation_id
    before = mgr.get_state(cid)
    with pytest.raises(RuntimeError, match="the tool broke"):
        support.run_sync(
            "Break",
            conversation_id=cid,
            model=calls("stage_then_explode"),
            state_delta={"step": 2},
        )
    with pytest.raises(RuntimeError, match="the model went away"):
        support.run_sync("Fail", conversation_id=cid, model=calls("choose_plan", then_fail=True))

    async def left_unread() -> None:
        async with support.run_stream("Leave", conversation_id=cid, state_delta={"step": 4}):
            pass

    asyncio.run(left_unread())
    # choose_plan ran (and staged) in the failed model's run and in the stream left unread.
    assert seen[1:] == [{}, {"step": 4}]
    assert mgr.get_state(cid) == before == {"step": 1, "plan": "annual", "app:release": 3}
    assert len(mgr.conversation.get_turns(cid)) == 1


def test_bad_state_app_deps_and_a_given_memory_deps(tmp_path: Path) -> None:
    """A bad ``state_delta=`` is refused before the model is called; ``user:`` keys of a run
    for no user fail the turn's write (neither is stored); a MemoryDeps no run was given
    refuses to stage.  ``deps_factory``'s deps reach the run's MemoryDeps; a MemoryDeps
    passed as ``deps=`` is the run's (what an earlier failed run left staged on it is
    dropped).  SQLite only: nothing here depends on the store."""
    store = SQLiteStore(tmp_path / "state.sqlite3")
    store.initialize()
    seen: Seen = []
    support = MemoryAgent(make_agent(seen), memory=MemoryManager(store=store))
    with pytest.raises(EntryValidationError):
        support.run_sync("Hi", state_delta={"plan": {1, 2}})
    assert seen == []  # the model (and its tool) never ran
    with pytest.raises(EntryValidationError, match="owner"):
        support.run_sync("Hi", conversation_id="c-none", state_delta={"user:tier": "gold"})
    assert not support.memory.conversation_exists("c-none")
    assert support.memory.get_state("c-none") == {}
    loose = MemoryDeps(support.memory, "c-none")
    with pytest.raises(EntryValidationError, match="no MemoryAgent run"):
        loose.stage_state({"plan": "x"})
    with pytest.raises(EntryValidationError):
        MemoryDeps(support.memory, "c-none").stage_state({"temp:": 1})

    agent: Agent[AppDeps, str] = Agent(calls("remember_locale"), deps_type=AppDeps)

    @agent.tool
    def remember_locale(ctx: RunContext[AppDeps]) -> str:
        ctx.deps.memory.stage_state({"user:locale": ctx.deps.locale})
        return "ok"

    mgr = MemoryManager(store=store, user_id="cy")
    app_support = MemoryAgent(
        agent, memory=mgr, deps_factory=lambda md: AppDeps(memory=md, locale="fr")
    )
    cid = app_support.run_sync("Bonjour").conversation_id
    assert mgr.get_state(cid) == {"user:locale": "fr"}

    plain = MemoryAgent(make_agent([]), memory=mgr)
    given = MemoryDeps(mgr, cid, "cy")
    with pytest.raises(RuntimeError):
        plain.run_sync("Break", deps=given, model=calls("stage_then_explode"))
    assert given.staged_state == {"plan": "broken", "user:tier": "none"}  # staged, never stored
    plain.run_sync("Again", deps=given, conversation_id=cid)
    assert mgr.get_state(cid) == {"user:locale": "fr", "plan": "annual", "app:release": 3}
    store.close()


@dataclass
class AppDeps:
    memory: MemoryDeps
    locale: str = "en"
