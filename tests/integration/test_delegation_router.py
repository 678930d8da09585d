"""``DelegationRouter``: each task to one sub-agent, which runs on its own fork of the memory.

The sub-agents and the choosing model run on pydantic-ai's ``FunctionModel``
(no network): each sub-agent's function first calls its ``remember`` tool
(a fact in its own working scope) and then answers with its name, so the
tests see who ran, where its fact went, and what the shared conversation holds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_backends import OpenedBackend

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, RunContext
from pydantic_ai import messages as msg
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai import (
    CapabilityStrategy,
    DelegationError,
    DelegationRouter,
    MemoryDeps,
    ModelChoiceStrategy,
    RoundRobinStrategy,
    SubAgent,
)

DESCRIPTIONS = {
    "billing": "Invoice, payment and refund questions; cards charged twice.",
    "tech": "Error, crash, crashes, install and installation problems.",
    "sales": "Price, plan, quote and upgrade questions from new customers.",
}


def _sub_agent_model(name: str) -> FunctionModel:
    """Calls ``remember(note=<the task>)`` once, then answers ``"<name> did it"``."""

    def respond(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
        last = messages[-1]
        if isinstance(last, msg.ModelRequest) and any(
            isinstance(p, msg.ToolReturnPart) for p in last.parts
        ):
            return msg.ModelResponse(parts=[msg.TextPart(f"{name} did it")])
        task = " ".join(str(p.content) for p in last.parts if isinstance(p, msg.UserPromptPart))
        return msg.ModelResponse(parts=[msg.ToolCallPart("remember", {"note": task})])

    return FunctionModel(respond)


def _pool() -> list[SubAgent]:
    pool = []
    for name, description in DESCRIPTIONS.items():
        agent = Agent(_sub_agent_model(name), deps_type=MemoryDeps)
        agent.tool(remember)
        pool.append(SubAgent(agent, name, description, tags=frozenset({name})))
    return pool


TASKS = ["first task", "second task", "third task", "fourth task"]


def _check_forks(memory: MemoryManager, by: list[str]) -> None:
    """Each sub-agent's fact is in its own scope only; the parent sees none."""
    for name in DESCRIPTIONS:
        fork = memory.fork(working_scope_id=f"delegation:{name}")
        last = max((i for i, who in enumerate(by) if who == name), default=None)
        assert fork.get_fact("last_task") == (None if last is None else TASKS[last])
    assert memory.get_fact("last_task") is None


def test_round_robin_routes_on_forks(layer_backend: OpenedBackend) -> None:
    memory = MemoryManager(store=layer_backend.store)
    router = DelegationRouter(_pool(), RoundRobinStrategy(), memory=memory)
    cid = memory.new_conversation()
    outputs = [router.route_sync(task, conversation_id=cid).output for task in TASKS]
    assert outputs == ["billing did it", "tech did it", "sales did it", "billing did it"]
    turns = MemoryManager(store=layer_backend.reopen()).conversation.get_turns(cid)
    assert [t.metadata["agent"] for t in turns] == ["billing", "tech", "sales", "billing"]
    assert [t.user_prompt for t in turns] == TASKS
    _check_forks(memory, ["billing", "tech", "sales", "billing"])


async def test_async_capability_routing_on_forks(layer_backend: OpenedBackend) -> None:
    memory = MemoryManager(store=layer_backend.store)
    router = DelegationRouter(_pool(), CapabilityStrategy(), memory=memory)
    tasks = {
        "I was CHARGED twice; please refund me!": "billing",
        "The app crashes on installation": "tech",
        "How much is an upgrade to the team plan?": "sales",
    }
    cid = None
    for task, expected in tasks.items():
        result = await router.route(task, conversation_id=cid, user_id="ada")
        cid = result.conversation_id
        assert result.output == f"{expected} did it"
        assert result.turn.metadata["agent"] == expected
        fork = router.memory_agent(expected).memory_for("ada")
        assert await fork.async_get_fact("last_task") == task
    assert cid is not None
    turns = await memory.conversation.async_get_turns(cid)
    assert [t.metadata["agent"] for t in turns] == list(tasks.values())


def test_capability_strategy_scores_with_the_search_rules() -> None:
    pool = _pool()
    strategy = CapabilityStrategy()
    assert strategy.select(pool, "REFUND, invoice... payment?").name == "billing"
    # tie (one word each): the earlier sub-agent
    assert strategy.select(pool, "refund error").name == "billing"
    assert strategy.select(pool, "error error crashes refund").name == "tech"
    with pytest.raises(DelegationError, match="fallback"):
        strategy.select(pool, "the weather in Lisbon")
    with pytest.raises(DelegationError):
        strategy.select(pool, "   ...   ")  # no words at all
    assert CapabilityStrategy(fallback="sales").select(pool, "the weather").name == "sales"
    assert CapabilityStrategy("tech").select(pool, "refund my invoice").name == "tech"
    with pytest.raises(DelegationError):  # words, not stems: "refunds" is not "refund"
        strategy.select(pool, "refunds")
    with pytest.raises(DelegationError, match="tag"):
        CapabilityStrategy("legal").select(pool, "refund")
    strict = CapabilityStrategy(min_score=0.5)
    with pytest.raises(DelegationError):
        strict.select(pool, "refund for the weather in Lisbon")  # 1 word of 6
    assert strict.select(pool, "refund invoice").name == "billing"


_DESCRIBED = {w.strip(".,;").lower() for d in DESCRIPTIONS.values() for w in d.split()}
WORDS = st.sampled_from([*sorted(_DESCRIBED), "lisbon", "weather", "x"])


@settings(max_examples=60, deadline=None)
@given(st.lists(WORDS, min_size=1, max_size=8).map(" ".join))
def test_capability_strategy_picks_a_best_score(task: str) -> None:
    pool = _pool()
    strategy = CapabilityStrategy()
    scores = strategy.scores(pool, task)
    best = max(score for _, score in scores)
    if best == 0:
        with pytest.raises(DelegationError):
            strategy.select(pool, task)
    else:
        chosen = strategy.select(pool, task)
        assert dict((a.name, s) for a, s in scores)[chosen.name] == best
        assert chosen is next(a for a, s in scores if s == best)  # the earliest of the best


class ChoosingModel:
    """A FunctionModel function that answers the router's question with ``answers`` in turn."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
        first = messages[0]
        assert isinstance(first, msg.ModelRequest)
        self.prompts.append(
            " ".join(str(p.content) for p in first.parts if isinstance(p, msg.UserPromptPart))
        )
        name = self.answers.pop(0)
        tool = info.output_tools[0].name
        args = json.dumps({"name": name, "reason": f"{name} fits"})
        return msg.ModelResponse(parts=[msg.ToolCallPart(tool, args)])


def test_model_choice_routes_sync_and_retries_a_wrong_name() -> None:
    chooser = ChoosingModel("nobody", "tech")  # the first answer is not a sub-agent
    strategy = ModelChoiceStrategy(FunctionModel(chooser))
    router = DelegationRouter(_pool(), strategy)
    result = router.route_sync("My screen goes black")
    assert result.output == "tech did it" and result.turn.metadata["agent"] == "tech"
    assert strategy.last_reason == "tech fits"
    assert "My screen goes black" in chooser.prompts[0]
    for name, description in DESCRIPTIONS.items():
        assert f"{name}: {description}" in chooser.prompts[0]
    assert chooser.answers == []  # asked twice


async def test_model_choice_routes_async() -> None:
    memory = MemoryManager()
    router = DelegationRouter(
        _pool(),
        ModelChoiceStrategy(TestModel(custom_output_args={"name": "sales", "reason": "price"})),
        memory=memory,
    )
    chosen = await router.async_choose("What does the team plan cost?")
    assert chosen.name == "sales"
    result = await router.route("What does the team plan cost?")
    assert result.turn.metadata["agent"] == "sales"
    fork = memory.fork(working_scope_id="delegation:sales")
    assert await fork.async_get_fact("last_task") == "What does the team plan cost?"


def test_router_checks_its_pool() -> None:
    pool = _pool()
    with pytest.raises(DelegationError, match="at least one"):
        DelegationRouter([], RoundRobinStrategy())
    with pytest.raises(DelegationError, match="unique"):
        DelegationRouter([pool[0], pool[0]], RoundRobinStrategy())
    with pytest.raises(DelegationError, match="name"):
        DelegationRouter([Agent(TestModel())], RoundRobinStrategy())
    with pytest.raises(TypeError):
        DelegationRouter(pool, object())  # type: ignore[arg-type]
    named = Agent(TestModel(), name="helper", description="helps with anything")
    router = DelegationRouter([named], CapabilityStrategy())
    assert router.agents[0].description == "helps with anything"
    assert router.choose("anything at all").name == "helper"
    with pytest.raises(DelegationError):
        router.memory_agent("nobody")


class Outsider:
    """A strategy that answers with a sub-agent of another pool."""

    def select(self, agents: Any, task: str) -> SubAgent:
        return SubAgent(Agent(TestModel()), "stranger")

    async def async_select(self, agents: Any, task: str) -> SubAgent:
        return self.select(agents, task)


def test_a_choice_outside_the_pool_is_refused() -> None:
    router = DelegationRouter(_pool(), Outsider())
    with pytest.raises(DelegationError, match="not in the pool"):
        router.route_sync("anything")


async def test_upstreams_names_and_shape() -> None:
    from firefly_orm.compat.firefly import agents as upstream
    from firefly_orm.compat.firefly.exceptions import DelegationError as UpstreamError

    UpstreamRouter, UpstreamRoundRobin = upstream.DelegationRouter, upstream.RoundRobinStrategy
    UpstreamCapability, ContentBasedStrategy = (
        upstream.CapabilityStrategy,
        upstream.ContentBasedStrategy,
    )

    named = [
        Agent(_sub_agent_model(name), name=name, description=text, deps_type=MemoryDeps)
        for name, text in DESCRIPTIONS.items()
    ]
    for agent in named:
        agent.tool(remember)
    memory = MemoryManager()
    router = UpstreamRouter(named, UpstreamRoundRobin(), memory=memory)
    assert (await router.route("first")).output == "billing did it"
    assert (await router.route("second")).output == "tech did it"
    picked = UpstreamRouter(
        named, ContentBasedStrategy(TestModel(custom_output_args={"name": "sales", "reason": "r"}))
    )
    assert (await picked.route("a quote please")).output == "sales did it"
    tagged = UpstreamRouter(_pool(), UpstreamCapability("tech"))
    assert (await tagged.route("refund")).output == "tech did it"
    with pytest.raises(UpstreamError):
        await UpstreamRouter(_pool(), UpstreamCapability("legal")).route("anything")


async def remember(ctx: RunContext[MemoryDeps], note: str) -> str:
    await ctx.deps.memory.async_set_fact("last_task", note)
    return "noted"
