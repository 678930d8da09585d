"""Upstream's ``PipelineContext(memory=)`` as the deps of a stored graph run.

Its upstream shape (keyword-only options, a 32-hex correlation id, step
results and outputs), then a ``pydantic_graph`` run on SQLite and PostgreSQL
whose nodes use the context's memory as upstream's steps and reasoning
patterns do (a ``reasoning:<pattern>`` fork, ``reasoning:step:<n>`` and
``reasoning:last_step`` facts): a failed step resumed with a new context
keeps every fact the earlier steps wrote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_graph import BaseNode, End, GraphBuilder, GraphRunContext
from store_backends import OpenedBackend, backend_params

from firefly_orm import MemoryManager
from firefly_orm.compat.firefly.pipeline import PipelineContext
from firefly_orm.compat.firefly.pipeline import context as context_module
from firefly_orm.pydantic_ai.graph import PersistentGraph


@dataclass
class StepResult:
    """A result with an ``output``, as upstream's ``NodeResult``."""

    output: Any


def test_upstream_shape() -> None:
    assert context_module.PipelineContext is PipelineContext
    plain = PipelineContext()
    assert (plain.inputs, plain.metadata, plain.memory) == (None, {}, None)
    assert re.fullmatch(r"[0-9a-f]{32}", plain.correlation_id)
    assert PipelineContext().correlation_id != plain.correlation_id
    with pytest.raises(TypeError):
        PipelineContext("in", {"a": 1})  # type: ignore[call-arg]
    ctx = PipelineContext("in", metadata={"team": "ops"}, correlation_id="c-1")
    assert (ctx.inputs, ctx.metadata, ctx.correlation_id) == ("in", {"team": "ops"}, "c-1")
    ctx.set_node_result("plan", StepResult({"steps": 3}))
    ctx.set_node_result("note", "no output attribute")
    assert ctx.get_node_output("plan") == {"steps": 3}
    assert ctx.get_node_output("plan", "steps") == 3
    assert ctx.get_node_output("plan", "missing") is None
    assert ctx.get_node_output("note") is None and ctx.get_node_output("nobody") is None
    assert ctx.get_node_result("note") == "no output attribute"
    results = ctx.results
    results.clear()
    assert set(ctx.results) == {"plan", "note"}  # a copy
    assert repr(ctx) == "PipelineContext(correlation_id='c-1', completed_nodes=['plan', 'note'])"


@dataclass
class Plan:
    """The graph state: the steps still to reason about."""

    steps: list[str] = field(default_factory=list)
    done: int = 0


FAIL_ONCE: set[int] = set()


@dataclass
class Reason(BaseNode[Plan, PipelineContext, str]):
    """One reasoning step, recorded as upstream's patterns record theirs."""

    async def run(self, ctx: GraphRunContext[Plan, PipelineContext]) -> Reason | End[str]:
        assert ctx.deps.memory is not None
        memory = ctx.deps.memory.fork(working_scope_id="reasoning:plan")
        number = ctx.state.done + 1
        if number in FAIL_ONCE:
            FAIL_ONCE.discard(number)
            raise RuntimeError(f"model unavailable at step {number}")
        thought = {"step": number, "about": ctx.state.steps[ctx.state.done]}
        await memory.async_set_fact(f"reasoning:step:{number}", thought)
        await memory.async_set_fact("reasoning:last_step", thought)
        ctx.deps.set_node_result(f"reason:{number}", StepResult(thought))
        ctx.state.done = number
        if number == len(ctx.state.steps):
            return End(f"{ctx.deps.inputs}: {number} steps")
        return Reason()


@pytest.mark.parametrize("layer_backend", backend_params(["sqlite", "postgres"]), indirect=True)
async def test_a_pipeline_context_is_a_graph_runs_deps(layer_backend: OpenedBackend) -> None:
    g = GraphBuilder(state_type=Plan, deps_type=PipelineContext, output_type=str)
    g.add(g.edge_from(g.start_node).to(Reason), g.node(Reason))
    graph = g.build()
    memory = MemoryManager(store=layer_backend.store)
    first = PipelineContext("tides", memory=memory)
    FAIL_ONCE.clear()
    FAIL_ONCE.add(3)
    plan = Plan(steps=["gather", "compare", "conclude"])
    with pytest.raises(RuntimeError, match="step 3"):
        await PersistentGraph(graph, layer_backend.store).run(
            "p1", state=plan, deps=first, inputs=Reason()
        )
    assert first.get_node_output("reason:2", "about") == "compare"

    reopened = MemoryManager(store=layer_backend.reopen())
    second = PipelineContext("tides", memory=reopened)
    runner = PersistentGraph(graph, layer_backend.reopen())
    assert await runner.resume("p1", deps=second, retry=True) == "tides: 3 steps"
    assert list(second.results) == ["reason:3"]  # the context is the process's, as upstream's
    facts = reopened.fork(working_scope_id="reasoning:plan")
    assert await facts.async_get_fact("reasoning:step:1") == {"step": 1, "about": "gather"}
    assert await facts.async_get_fact("reasoning:last_step") == {"step": 3, "about": "conclude"}
    assert await reopened.async_get_fact("reasoning:last_step") is None  # the fork's scope only
