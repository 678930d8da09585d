"""No transaction held across a model call (issue 34, section 3), seen by PostgreSQL.

A :class:`~firefly_orm.pydantic_ai.MemoryAgent` whose memory is bound to the
app's session (``store.bind_session(session)``) reads the conversation through
that session, which begins the session's transaction.  Kept open while the
model thinks, the app's connection would sit ``idle in transaction`` for the
whole call.  Here the model (a pydantic-ai ``FunctionModel``), the agent's
tools and the conversation's summarizer ask the server, from a connection of
their own, what ``pg_stat_activity`` says of the app's connection (its backend
pid, read beforehand; the app's pools hold one connection each, so the pid is
the only connection the app can use) at the moment they run: ``idle``, for
``run_sync``, ``run``, ``run_stream`` and ``iter``.  The control test holds the
app's own transaction across the run and sees ``idle in transaction``: the
probe can tell.

A turn another writer adds while the model thinks is kept: the run's turn is
written after it (the write re-reads the conversation's head).
"""

from __future__ import annotations

import itertools
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

pytest.importorskip("pydantic_ai")

from dbutil import drop_schema
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

from firefly_orm import migrate
from firefly_orm.bridges._steps import LocksRows
from firefly_orm.conversation import ConversationTurn
from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai import MemoryAgent, MemoryDeps
from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore

IDLE = "idle"
IN_TRANSACTION = "idle in transaction"


@pytest.fixture(scope="module")
def schema(postgres_url: str) -> Iterator[str]:
    """One migrated schema for the module (each test works on conversations of its own)."""
    name = f"mct_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    migrate.upgrade(admin, schema_name=name)
    try:
        yield name
    finally:
        drop_schema(admin, name)
        admin.dispose()


@dataclass
class Probe:
    """Asks the server, from a connection of its own, the state of the app's connection."""

    engine: sa.Engine
    pid: int = 0
    seen: list[str] = field(default_factory=list)

    def state(self) -> str:
        with self.engine.connect() as conn:
            found = conn.execute(
                sa.text("SELECT state FROM pg_stat_activity WHERE pid = :pid"), {"pid": self.pid}
            ).scalar_one()
        return str(found)

    def record(self) -> None:
        self.seen.append(self.state())


@dataclass
class App:
    """The app's engines (one pooled connection each), our store on them, and the probe."""

    engine: sa.Engine
    async_engine: AsyncEngine
    store: SQLAlchemyStore
    probe: Probe
    other: PostgreSQLStore  # another writer, on connections of its own


def _one_connection() -> dict[str, Any]:
    return {"pool_size": 1, "max_overflow": 0, "pool_timeout": 10}


@pytest.fixture
def app(postgres_url: str, schema: str) -> Iterator[App]:
    engine = sa.create_engine(postgres_url, **_one_connection())
    async_engine = create_async_engine(postgres_url, **_one_connection())
    store = SQLAlchemyStore(engine=engine, async_engine=async_engine, schema_name=schema)
    store.initialize()  # checked at head now, not on a connection a test holds
    probe_engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    other = PostgreSQLStore(postgres_url, schema_name=schema)
    try:
        yield App(engine, async_engine, store, Probe(probe_engine), other)
    finally:
        other.close()
        store.close()
        engine.dispose()
        probe_engine.dispose()


@pytest.fixture
async def aapp(app: App) -> AsyncIterator[App]:
    """:func:`app`, its async engine disposed on the test's event loop."""
    yield app
    await app.async_engine.dispose()


def sync_pid(app: App) -> int:
    with app.engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


async def async_pid(app: App) -> int:
    async with app.async_engine.connect() as conn:
        return int((await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one())


class ProbingModel:
    """A FunctionModel function that records the app connection's state on every call.

    A prompt starting with ``note`` first calls the ``note`` tool (which
    records the state too, then sets a fact through the run's memory), then
    answers; ``during`` runs in every model call (another writer, say).
    """

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.during: list[Any] = []
        self._ids = itertools.count()

    def _answer(self, messages: list[ModelMessage]) -> ModelResponse:
        self.probe.record()
        for action in self.during:
            action()
        last = messages[-1]
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart(content="noted")])
        prompt = " ".join(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
        if prompt.startswith("note"):
            call = ToolCallPart(
                tool_name="note", args={"text": prompt}, tool_call_id=f"c{next(self._ids)}"
            )
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(content="fine")])

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return self._answer(messages)

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.probe.record()
        for action in self.during:
            action()
        yield "streamed "
        yield "fine"


def memory_agent(model: ProbingModel, memory: MemoryManager) -> MemoryAgent[MemoryDeps, str]:
    agent = Agent(
        FunctionModel(model, stream_function=model.stream),
        deps_type=MemoryDeps,
        instructions="Be brief.",
    )
    probe = model.probe

    @agent.tool
    async def note(ctx: RunContext[MemoryDeps], text: str) -> str:
        probe.record()
        await ctx.deps.memory.async_set_fact("note", text)
        return "noted"

    return MemoryAgent(agent, memory=memory)


def sync_memory_agent(model: ProbingModel, memory: MemoryManager) -> MemoryAgent[MemoryDeps, str]:
    """The same, its tool on the sync methods (a sync Session serves those only)."""
    agent = Agent(FunctionModel(model), deps_type=MemoryDeps, instructions="Be brief.")
    probe = model.probe

    @agent.tool
    def note(ctx: RunContext[MemoryDeps], text: str) -> str:
        probe.record()
        ctx.deps.memory.set_fact("note", text)
        return "noted"

    return MemoryAgent(agent, memory=memory)


def new_user() -> str:
    """A user of one test (the module's tests share a schema)."""
    return f"u-{uuid.uuid4().hex[:12]}"


def owner_conversation(app: App, user: str) -> str:
    """The one conversation of ``user`` (as committed)."""
    (cid,) = MemoryManager(store=app.other).user_conversations(user)
    return cid


def turns_seen_by_others(app: App, cid: str) -> list[ConversationTurn]:
    """The conversation's turns as committed (another connection's view)."""
    return MemoryManager(store=app.other).conversation.get_turns(cid)


# --------------------------------------------------------------------------- sync


def test_run_sync_calls_the_model_with_the_connection_idle(app: App) -> None:
    user = new_user()
    app.probe.pid = sync_pid(app)
    model = ProbingModel(app.probe)
    cid = f"c-{uuid.uuid4().hex}"
    with Session(app.engine) as session:
        memory = MemoryManager(store=app.store.bind_session(session), user_id=user)
        memory.add_turn(cid, "Hello", "Hi")
        session.commit()
        support = sync_memory_agent(model, memory)

        result = support.run_sync("How are you?", conversation_id=cid)
        assert app.probe.seen == [IDLE]
        # the turn is in the app's transaction, for the app to commit
        assert app.probe.state() == IN_TRANSACTION
        assert [t.user_prompt for t in turns_seen_by_others(app, cid)] == ["Hello"]
        session.commit()
    assert [t.user_prompt for t in turns_seen_by_others(app, cid)] == ["Hello", "How are you?"]
    assert result.turn_id == 1


def test_run_sync_tools_leave_the_connection_idle_for_the_next_request(app: App) -> None:
    user = new_user()
    app.probe.pid = sync_pid(app)
    model = ProbingModel(app.probe)
    with Session(app.engine) as session:
        memory = MemoryManager(store=app.store.bind_session(session), user_id=user)
        support = sync_memory_agent(model, memory)
        result = support.run_sync("note: the order is A-1042")
        # model call, the tool, the model call after the tool: never in a transaction
        assert app.probe.seen == [IDLE, IDLE, IDLE]
        session.commit()
    # the tool's fact was committed before the next model request: the tool's doing
    owner = MemoryManager(store=app.other, user_id=user)
    assert owner.get_fact("note") == "note: the order is A-1042"
    assert [t.user_prompt for t in owner.conversation.get_turns(result.conversation_id)] == [
        "note: the order is A-1042"
    ]


def test_the_summarizer_of_the_runs_write_runs_with_the_connection_idle(app: App) -> None:
    user = new_user()
    app.probe.pid = sync_pid(app)
    model = ProbingModel(app.probe)
    summarized: list[str] = []

    def summarizer(turns: list[ConversationTurn]) -> str:
        summarized.append(app.probe.state())
        return "summary: " + ", ".join(t.user_prompt for t in turns)

    cid = f"c-{uuid.uuid4().hex}"
    with Session(app.engine) as session:
        memory = MemoryManager(
            store=app.store.bind_session(session),
            user_id=user,
            summarizer=summarizer,
            max_messages=4,
        )
        for n in range(2):
            memory.add_turn(cid, f"q{n}", f"a{n}")
            session.commit()
        summarized.clear()
        support = sync_memory_agent(model, memory)
        support.run_sync("q2", conversation_id=cid)
        session.commit()
    assert summarized == [IDLE]  # the write evicted, and summarized outside any transaction
    assert app.probe.seen == [IDLE]
    stored = MemoryManager(store=app.other, user_id=user).conversation
    assert stored.get_summary(cid) == "summary: q0"


@pytest.mark.parametrize("open_before", [False, True])
def test_add_turn_on_the_apps_session_summarizes_with_the_connection_idle(
    app: App, open_before: bool
) -> None:
    """Plain ``add_turn`` (no agent): its first attempt began the session's
    transaction and wrote nothing, so it is ended before the summarizer runs;
    a transaction the app had open before is the app's and stays."""
    user = new_user()
    app.probe.pid = sync_pid(app)
    summarized: list[str] = []

    def summarizer(turns: list[ConversationTurn]) -> str:
        summarized.append(app.probe.state())
        return "summary"

    cid = f"c-{uuid.uuid4().hex}"
    with Session(app.engine) as session:
        memory = MemoryManager(
            store=app.store.bind_session(session),
            user_id=user,
            summarizer=summarizer,
            max_messages=4,
        )
        for n in range(2):
            memory.add_turn(cid, f"q{n}", f"a{n}")
            session.commit()
        summarized.clear()
        if open_before:
            session.execute(sa.text("SELECT 1"))
        memory.add_turn(cid, "q2", "a2")
        session.commit()
    assert summarized == [IN_TRANSACTION if open_before else IDLE]
    assert MemoryManager(store=app.other).conversation.get_summary(cid) == "summary"


def test_a_summary_redone_after_a_lost_race_is_not_made_under_the_apps_lock(app: App) -> None:
    """On a store that locks rows, a writer whose summary went stale redoes it holding
    the head's lock; on the app's session that lock would be held in the app's
    transaction, so there the summary is redone outside any transaction instead."""
    user = new_user()
    app.probe.pid = sync_pid(app)
    cid = f"c-{uuid.uuid4().hex}"
    other = MemoryManager(store=app.other, user_id=user)
    summarized: list[str] = []

    def summarizer(turns: list[ConversationTurn]) -> str:
        summarized.append(app.probe.state())
        if len(summarized) == 1:  # another writer moves the conversation on meanwhile
            other.add_turn(cid, "q-other", "a-other")
        return f"summary {len(summarized)}"

    for n in range(2):
        other.add_turn(cid, f"q{n}", f"a{n}")
    with Session(app.engine) as session:
        bound = app.store.bind_session(session)
        assert LocksRows().perform(app.store) is True  # PostgreSQL: the holding path exists
        assert LocksRows().perform(bound) is False  # but never on the app's session
        memory = MemoryManager(store=bound, user_id=user, summarizer=summarizer, max_messages=4)
        memory.add_turn(cid, "q2", "a2")
        session.commit()
    assert summarized == [IDLE, IDLE]  # the second summary, after the lost race, too
    stored = MemoryManager(store=app.other).conversation
    assert [t.user_prompt for t in stored.get_turns(cid)] == ["q-other", "q2"]


def test_a_transaction_of_the_app_is_left_open_and_the_probe_sees_it(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    user = new_user()
    app.probe.pid = sync_pid(app)
    model = ProbingModel(app.probe)
    with Session(app.engine) as session:
        memory = MemoryManager(store=app.store.bind_session(session), user_id=user)
        session.execute(sa.text("SELECT 1"))  # the app's own transaction, begun before the run
        support = sync_memory_agent(model, memory)
        with caplog.at_level(logging.WARNING, logger="firefly_orm"):
            result = support.run_sync("Hello")
        assert app.probe.seen == [IN_TRANSACTION]  # the app's: not ended by the run
        assert "already in a transaction" in caplog.text
        session.rollback()  # the app's call: the turn goes with its transaction
    assert turns_seen_by_others(app, result.conversation_id) == []


# --------------------------------------------------------------------------- async


@pytest.mark.parametrize("how", ["run", "run_stream", "iter"])
async def test_async_runs_call_the_model_with_the_connection_idle(aapp: App, how: str) -> None:
    user = new_user()
    app = aapp
    app.probe.pid = await async_pid(app)
    model = ProbingModel(app.probe)
    cid = f"c-{uuid.uuid4().hex}"
    async with AsyncSession(app.async_engine) as session:
        memory = MemoryManager(store=app.store.bind_session(session), user_id=user)
        await memory.async_add_turn(cid, "Hello", "Hi")
        await session.commit()
        support = memory_agent(model, memory)
        if how == "run":
            await support.run("How are you?", conversation_id=cid)
        elif how == "run_stream":
            async with support.run_stream("How are you?", conversation_id=cid) as stream:
                assert await stream.get_output() == "streamed fine"
        else:
            async with support.iter("How are you?", conversation_id=cid) as agent_run:
                async for _node in agent_run:
                    pass
        assert app.probe.seen == [IDLE]
        await session.commit()
    assert [t.user_prompt for t in turns_seen_by_others(app, cid)] == ["Hello", "How are you?"]


@pytest.mark.parametrize("how", ["run", "iter"])
async def test_async_tools_leave_the_connection_idle(aapp: App, how: str) -> None:
    user = new_user()
    app = aapp
    app.probe.pid = await async_pid(app)
    model = ProbingModel(app.probe)
    async with AsyncSession(app.async_engine) as session:
        memory = MemoryManager(store=app.store.bind_session(session), user_id=user)
        support = memory_agent(model, memory)
        if how == "run":
            await support.run("note: tea, no sugar")
        else:
            async with support.iter("note: tea, no sugar") as agent_run:
                async for _node in agent_run:
                    pass
        assert app.probe.seen == [IDLE, IDLE, IDLE]
        await session.commit()
    cid = owner_conversation(app, user)
    owner = MemoryManager(store=app.other, user_id=user)
    assert owner.get_fact("note") == "note: tea, no sugar"
    assert len(owner.conversation.get_turns(cid)) == 1


# --------------------------------------------------------------------------- the head moves


def test_a_turn_added_during_the_model_call_is_kept(app: App) -> None:
    user = new_user()
    app.probe.pid = sync_pid(app)
    model = ProbingModel(app.probe)
    cid = f"c-{uuid.uuid4().hex}"
    other = MemoryManager(store=app.other, user_id=user)
    other.add_turn(cid, "first", "one")
    model.during.append(lambda: other.add_turn(cid, "meanwhile", "two"))
    with Session(app.engine) as session:
        memory = MemoryManager(store=app.store.bind_session(session), user_id=user)
        result = sync_memory_agent(model, memory).run_sync("mine", conversation_id=cid)
        session.commit()
    turns = other.conversation.get_turns(cid)
    assert [(t.turn_id, t.user_prompt) for t in turns] == [
        (0, "first"),
        (1, "meanwhile"),
        (2, "mine"),
    ]
    assert result.turn_id == 2


async def test_a_turn_added_during_an_async_model_call_is_kept(aapp: App) -> None:
    user = new_user()
    app = aapp
    model = ProbingModel(app.probe)
    app.probe.pid = await async_pid(app)
    cid = f"c-{uuid.uuid4().hex}"
    other = MemoryManager(store=app.other, user_id=user)
    other.add_turn(cid, "first", "one")
    model.during.append(lambda: other.add_turn(cid, "meanwhile", "two"))
    async with AsyncSession(app.async_engine) as session:
        memory = MemoryManager(store=app.store.bind_session(session), user_id=user)
        result = await memory_agent(model, memory).run("mine", conversation_id=cid)
        await session.commit()
    assert app.probe.seen == [IDLE]
    assert [t.user_prompt for t in other.conversation.get_turns(cid)] == [
        "first",
        "meanwhile",
        "mine",
    ]
    assert result.turn_id == 2
