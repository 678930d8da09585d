"""pydantic_graph runs on our stores: the snapshot contract, claims, resuming, on every store.

:class:`~firefly_orm.pydantic_ai.graph.GraphPersistence` (statuses, claims,
leases, reads) sync and async on every layer backend; two workers racing for
one snapshot; :class:`~firefly_orm.pydantic_ai.graph.PersistentGraph` runs
that fail, are cancelled mid-node and resume from a new store object (a new
process's view).  The kill -9 restart on SQLite and PostgreSQL is in
``tests/integration/test_graph_restart.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from modes import call
from pydantic_graph import BaseNode, End, GraphBuilder, GraphRunContext, reduce_sum
from store_backends import OpenedBackend

from firefly_orm import MemoryManager
from firefly_orm.errors import EntryValidationError
from firefly_orm.pydantic_ai.graph import (
    GraphPersistence,
    GraphRunClaimedError,
    GraphRunExistsError,
    GraphRunNotFoundError,
    MemoryGraphDeps,
    PendingNode,
    PersistentGraph,
    SnapshotStatusError,
)
from firefly_orm.store import InMemoryStore


@dataclass
class Tally:
    """The state of the test graphs."""

    counter: int = 0
    log: list[str] = field(default_factory=list)


#: What the count-down nodes do at a given counter: "raise" once, or "hang" until cancelled.
TRAPS: dict[int, str] = {}
#: Set by a "hang" trap once its node has started (the stored status is no proof: it is
#: written before the node runs, and a run cancelled then leaves the trap armed).
HANGING: dict[int, asyncio.Event] = {}
#: The longest a test waits for anything (a hang fails the test instead of the suite).
WAIT_SECONDS = 30.0


@dataclass
class CountDown(BaseNode[Tally, MemoryGraphDeps, list[str]]):
    """Logs the counter, writes it as a fact, counts down; ends with the log."""

    step: int = 1

    async def run(self, ctx: GraphRunContext[Tally, MemoryGraphDeps]) -> CountDown | End[list[str]]:
        trap = TRAPS.pop(ctx.state.counter, None)
        if trap == "raise":
            raise RuntimeError(f"trap at {ctx.state.counter}")
        if trap == "hang":
            HANGING[ctx.state.counter].set()
            await asyncio.Event().wait()
        ctx.state.log.append(f"cd{ctx.state.counter}")
        await ctx.deps.memory.async_set_fact(f"seen:{ctx.state.counter}", self.step)
        if ctx.state.counter <= 0:
            return End(ctx.state.log)
        ctx.state.counter -= 1
        return CountDown(step=self.step)


def count_down_graph() -> Any:
    g = GraphBuilder(state_type=Tally, deps_type=MemoryGraphDeps, output_type=list[str])
    g.add(g.edge_from(g.start_node).to(CountDown), g.node(CountDown))
    return g.build()


# --------------------------------------------------------------------------- the contract


async def test_snapshot_statuses_and_reads(layer_backend: OpenedBackend, mode: str) -> None:
    store = layer_backend.store
    first_worker = GraphPersistence(store, run_id="r1")
    first_worker.set_types(Tally, int)
    assert await call(mode, first_worker, "load_all") == []
    with pytest.raises(GraphRunNotFoundError):
        await call(mode, first_worker, "load_next")
    with pytest.raises(GraphRunNotFoundError):
        await call(mode, first_worker, "snapshot_node", Tally(), [PendingNode("a", 1)])

    first = await call(
        mode, first_worker, "begin", Tally(1, ["x"]), [PendingNode("a", 1)], inputs={"in": 1}
    )
    assert (first.kind, first.status, first.owner) == ("node", "pending", first_worker.owner)
    assert first.state == Tally(1, ["x"]) and first.lease_until is not None
    with pytest.raises(GraphRunExistsError):
        await call(mode, first_worker, "begin", Tally(), [PendingNode("a", 1)])
    second = await call(mode, first_worker, "snapshot_node", Tally(2), [PendingNode("b", [2])])
    assert (second.status, second.owner) == ("created", None)
    assert int(second.id) > int(first.id)

    if mode == "sync":
        with first_worker.record_run(first.id):
            pass
    else:
        async with first_worker.async_record_run(first.id):
            pass
    with pytest.raises(SnapshotStatusError, match="has already run"):
        await call(mode, first_worker, "start", first.id)

    other = GraphPersistence(layer_backend.reopen(), run_id="r1", owner="other-worker")
    other.set_types(Tally, int)
    claimed = await call(mode, other, "load_next")
    assert (claimed.id, claimed.status, claimed.owner) == (second.id, "pending", "other-worker")
    assert claimed.nodes == (PendingNode("b", [2]),)
    assert await call(mode, first_worker, "load_next") is None  # held, lease live
    with pytest.raises(SnapshotStatusError, match="claimed by 'other-worker'"):
        await call(mode, first_worker, "start", second.id)
    with pytest.raises(ValueError, match="boom"):
        if mode == "sync":
            with other.record_run(second.id):
                raise ValueError("boom")
        else:
            async with other.async_record_run(second.id):
                raise ValueError("boom")
    end = await call(mode, first_worker, "snapshot_end", Tally(3, ["done"]), 7)
    assert (end.kind, end.status, end.output) == ("end", "success", 7)

    history = await call(mode, first_worker, "load_all")
    assert [(s.id, s.kind, s.status) for s in history] == [
        (first.id, "node", "success"),
        (second.id, "node", "error"),
        (end.id, "end", "success"),
    ]
    assert history[1].error == "ValueError: boom" and history[1].duration is not None
    assert history[2].state == Tally(3, ["done"])
    assert await call(mode, first_worker, "stored_inputs") == {"in": 1}
    with pytest.raises(SnapshotStatusError, match="has already run"):
        await call(mode, first_worker, "finish", second.id)
    with pytest.raises(SnapshotStatusError, match="does not exist"):
        await call(mode, first_worker, "start", "999")
    await call(mode, first_worker, "delete")
    assert await call(mode, first_worker, "load_all") == []


def test_two_workers_never_claim_the_same_snapshot(layer_backend: OpenedBackend) -> None:
    setup = GraphPersistence(layer_backend.store, run_id="race")
    setup.begin(None, [PendingNode("a", 0)])
    workers = [
        GraphPersistence(layer_backend.reopen(), run_id="race", owner=f"w{i}") for i in range(2)
    ]
    rounds = 4
    barrier = threading.Barrier(2, timeout=WAIT_SECONDS)
    won: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(rounds):
                barrier.wait()
                claimed = workers[i].load_next()
                if claimed is not None:
                    won[i].append(claimed.id)
                barrier.wait()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            barrier.abort()

    for _ in range(rounds):
        setup.snapshot_node(None, [PendingNode("a", 0)])
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_SECONDS)
    assert not any(t.is_alive() for t in threads) and errors == []
    claims = won[0] + won[1]
    assert len(claims) == len(set(claims)) == rounds  # each snapshot claimed exactly once
    owners = {s.id: s.owner for s in setup.load_all()}
    assert all(owners[i] == "w0" for i in won[0]) and all(owners[i] == "w1" for i in won[1])


def test_lapsed_claims_and_take_over(layer_backend: OpenedBackend) -> None:
    holder = GraphPersistence(layer_backend.store, run_id="lease", owner="holder")
    first = holder.begin(None, [PendingNode("a", 0)])
    thief = GraphPersistence(layer_backend.reopen(), run_id="lease", owner="thief")
    assert thief.load_next() is None
    taken = thief.load_next(take_over=True)
    assert taken is not None and (taken.id, taken.owner) == (first.id, "thief")
    with pytest.raises(SnapshotStatusError, match="claimed by 'thief'"):
        holder.start(first.id)

    brief = GraphPersistence(
        layer_backend.reopen(), run_id="lease", owner="brief", lease_seconds=0.05
    )
    assert brief.load_next(take_over=True) is not None
    brief.start(first.id)
    time.sleep(0.1)  # the lease lapses: the holder may take the running snapshot back
    back = holder.load_next()
    assert back is not None and (back.id, back.owner, back.status) == (
        first.id,
        "holder",
        "pending",
    )
    with pytest.raises(SnapshotStatusError, match="claim was lost"):
        brief.finish(first.id)
    with holder.record_run(first.id):
        pass
    assert [s.status for s in holder.load_all()] == ["success"]


# --------------------------------------------------------------------------- running graphs


async def test_a_graph_runs_fails_and_resumes(layer_backend: OpenedBackend) -> None:
    graph = count_down_graph()
    memory = MemoryManager(store=layer_backend.store)
    deps = MemoryGraphDeps(memory=memory)
    runner = PersistentGraph(graph, layer_backend.store)
    TRAPS.clear()
    TRAPS[1] = "raise"
    with pytest.raises(RuntimeError, match="trap at 1"):
        await runner.run("g1", state=Tally(counter=3), deps=deps, inputs=CountDown(step=2))
    history = await runner.persistence("g1").async_load_all()
    assert [s.status for s in history] == ["success", "success", "error"]
    assert history[-1].state == Tally(1, ["cd3", "cd2"])
    assert history[-1].nodes == (PendingNode("CountDown", CountDown(step=2)),)

    reopened = PersistentGraph(graph, layer_backend.reopen())
    with pytest.raises(SnapshotStatusError, match="retry=True"):
        await reopened.resume("g1", deps=deps)
    output = await reopened.resume("g1", deps=deps, retry=True)
    assert output == ["cd3", "cd2", "cd1", "cd0"]  # every step once
    assert await memory.async_get_fact("seen:0") == 2
    assert await reopened.resume("g1", deps=deps) == output  # ended: its output, nothing runs
    statuses = [(s.kind, s.status) for s in await reopened.persistence("g1").async_load_all()]
    assert statuses[-1] == ("end", "success") and ("node", "error") in statuses
    with pytest.raises(GraphRunExistsError):
        await runner.run("g1", state=Tally(), deps=deps, inputs=CountDown())
    with pytest.raises(GraphRunNotFoundError):
        await runner.resume("nobody", deps=deps)


async def test_a_run_cancelled_mid_node_resumes_elsewhere(layer_backend: OpenedBackend) -> None:
    graph = count_down_graph()
    deps = MemoryGraphDeps(memory=MemoryManager(store=layer_backend.store))
    runner = PersistentGraph(graph, layer_backend.store)
    TRAPS.clear()
    TRAPS[2] = "hang"
    HANGING.clear()
    hanging = HANGING[2] = asyncio.Event()
    task = asyncio.create_task(
        runner.run("g2", state=Tally(counter=4), deps=deps, inputs=CountDown())
    )
    await asyncio.wait_for(hanging.wait(), WAIT_SECONDS)  # the node at 2 runs and hangs
    history = await runner.persistence("g2").async_load_all()
    assert (history[-1].state.counter, history[-1].status) == (2, "running")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAIT_SECONDS)

    elsewhere = PersistentGraph(graph, layer_backend.reopen())
    with pytest.raises(GraphRunClaimedError) as claimed:
        await elsewhere.resume("g2", deps=deps)
    assert claimed.value.owner is not None and claimed.value.lease_until is not None
    output = await asyncio.wait_for(elsewhere.resume("g2", deps=deps, take_over=True), WAIT_SECONDS)
    assert output == ["cd4", "cd3", "cd2", "cd1", "cd0"]
    statuses = [s.status for s in await elsewhere.persistence("g2").async_load_all()]
    assert statuses == ["success"] * 6  # five nodes, the end


# --------------------------------------------------------------------------- graph shapes


# Function steps take ``ctx: Any`` here: mypy cannot bind StepContext's type
# parameters (declared with ``infer_variance=True``), so it could not check them.


@dataclass
class Order:
    """A typed step input (restored as itself, not a dict, through ``input_types``)."""

    item: str
    quantity: int


async def test_typed_step_inputs_come_back_as_their_type() -> None:
    store = InMemoryStore()
    g = GraphBuilder(state_type=Tally, input_type=str, output_type=str)

    @g.step
    async def parse(ctx: Any) -> Order:
        ctx.state.log.append("parse")
        return Order(ctx.inputs, 2)

    @g.step
    async def price(ctx: Any) -> str:
        assert isinstance(ctx.inputs, Order)
        ctx.state.log.append("price")
        if TRAPS.pop(0, None) == "raise":
            raise RuntimeError("price service down")
        return f"{ctx.inputs.quantity} x {ctx.inputs.item}"

    g.add(
        g.edge_from(g.start_node).to(parse),
        g.edge_from(parse).to(price),
        g.edge_from(price).to(g.end_node),
    )
    runner = PersistentGraph(g.build(), store, input_types={"price": Order})
    TRAPS.clear()
    TRAPS[0] = "raise"
    with pytest.raises(RuntimeError, match="price service down"):
        await runner.run("o1", state=Tally(), inputs="tea")
    failed = (await runner.persistence("o1").async_load_all())[-1]
    assert failed.nodes == (PendingNode("price", Order("tea", 2)),)
    assert await runner.resume("o1", retry=True) == "2 x tea"


async def test_a_fork_and_its_join_are_one_step() -> None:
    g = GraphBuilder(state_type=Tally, input_type=int, output_type=int)

    @g.step
    async def spread(ctx: Any) -> list[int]:
        return list(range(ctx.inputs))

    @g.step
    async def square(ctx: Any) -> int:
        if TRAPS.pop(ctx.inputs, None) == "raise":
            raise RuntimeError(f"cannot square {ctx.inputs}")
        return int(ctx.inputs) ** 2

    total = g.join(reduce_sum, initial=0)

    @g.step
    async def report(ctx: Any) -> int:
        ctx.state.log.append(f"total {ctx.inputs}")
        return int(ctx.inputs)

    g.add(
        g.edge_from(g.start_node).to(spread),
        g.edge_from(spread).map().to(square),
        g.edge_from(square).to(total),
        g.edge_from(total).to(report),
        g.edge_from(report).to(g.end_node),
    )
    runner = PersistentGraph(g.build(), InMemoryStore())
    TRAPS.clear()
    TRAPS[2] = "raise"  # one branch of the fork fails: the step that opened the fork failed
    with pytest.raises(RuntimeError, match="cannot square 2"):
        await runner.run("f1", state=Tally(), inputs=4)
    assert await runner.resume("f1", retry=True) == 0 + 1 + 4 + 9
    history = await runner.persistence("f1").async_load_all()
    taken_at = [([n.node_id for n in s.nodes], s.status) for s in history if s.kind == "node"]
    assert taken_at == [  # the fork node, then what follows its join: never inside the fork
        (["spread"], "success"),
        (["map"], "error"),
        (["map"], "success"),
        (["report"], "success"),
        (["__end__"], "success"),
    ]


def test_bad_arguments_are_refused() -> None:
    graph = count_down_graph()
    with pytest.raises(EntryValidationError, match="graph"):
        PersistentGraph(object())  # type: ignore[arg-type]
    with pytest.raises(EntryValidationError, match="lease_seconds"):
        PersistentGraph(graph, lease_seconds=0)
    with pytest.raises(EntryValidationError, match="no node 'nope'"):
        PersistentGraph(graph, input_types={"nope": int})
    with pytest.raises(EntryValidationError, match="run_id"):
        GraphPersistence(run_id="")
    persistence = GraphPersistence(InMemoryStore(), run_id="v")
    with pytest.raises(EntryValidationError, match="at least one node"):
        persistence.begin(None, [])
    with pytest.raises(EntryValidationError, match="PendingNode"):
        persistence.begin(None, [("a", 1)])  # type: ignore[list-item]
    assert persistence.load_all() == []  # nothing was written


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(state=JSON_VALUES, inputs=JSON_VALUES)
def test_any_json_state_and_inputs_come_back_or_are_refused(state: Any, inputs: Any) -> None:
    persistence = GraphPersistence(InMemoryStore(), run_id="json")
    try:
        persistence.begin(state, [PendingNode("step", inputs)], inputs=inputs)
    except EntryValidationError:
        assert persistence.load_all() == []  # refused whole: nothing written
        return
    (stored,) = persistence.load_all()
    assert (stored.state, stored.nodes) == (state, (PendingNode("step", inputs),))
    assert persistence.stored_inputs() == inputs


async def test_a_running_step_keeps_its_claim_and_a_taken_one_is_lost() -> None:
    release = asyncio.Event()
    g = GraphBuilder(state_type=Tally, output_type=str)

    @g.step
    async def slow(ctx: Any) -> str:
        await release.wait()
        return "done"

    g.add(g.edge_from(g.start_node).to(slow), g.edge_from(slow).to(g.end_node))
    store = InMemoryStore()
    runner = PersistentGraph(g.build(), store, lease_seconds=0.3)
    thief = GraphPersistence(store, run_id="slow", owner="thief")

    async def running() -> None:
        async with asyncio.timeout(WAIT_SECONDS):
            while not any(s.status == "running" for s in await thief.async_load_all()):
                await asyncio.sleep(0.01)

    task = asyncio.create_task(runner.run("slow", state=Tally()))
    await running()
    await asyncio.sleep(0.8)  # over two leases: the runner renewed its claim meanwhile
    assert await thief.async_load_next() is None
    release.set()
    assert await asyncio.wait_for(task, WAIT_SECONDS) == "done"

    release.clear()
    task = asyncio.create_task(runner.run("slow-2", state=Tally()))
    thief = GraphPersistence(store, run_id="slow-2", owner="thief")
    await running()
    assert await thief.async_load_next(take_over=True) is not None
    release.set()
    with pytest.raises(SnapshotStatusError, match="claim was lost"):
        await asyncio.wait_for(task, WAIT_SECONDS)
