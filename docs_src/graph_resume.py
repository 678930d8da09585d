from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from pydantic_graph import BaseNode, End, GraphBuilder, GraphRunContext

from firefly_orm import MemoryManager, SQLiteStore
from firefly_orm.pydantic_ai.graph import MemoryGraphDeps, PersistentGraph


@dataclass
class Research:  # the graph state: stored with every snapshot
    topics: list[str]
    notes: list[str] = field(default_factory=list)


FLAKY = {"currents"}  # a step that fails once, like a model call that times out


@dataclass
class Study(BaseNode[Research, MemoryGraphDeps, str]):
    async def run(self, ctx: GraphRunContext[Research, MemoryGraphDeps]) -> Study | End[str]:
        topic = ctx.state.topics[len(ctx.state.notes)]
        if topic in FLAKY:
            FLAKY.discard(topic)
            raise TimeoutError(f"the model did not answer about {topic}")
        ctx.state.notes.append(f"notes on {topic}")
        await ctx.deps.memory.async_set_fact(f"studied:{topic}", True)  # the run's memory
        if len(ctx.state.notes) == len(ctx.state.topics):
            return End("; ".join(ctx.state.notes))
        return Study()


builder = GraphBuilder(state_type=Research, deps_type=MemoryGraphDeps, output_type=str)
builder.add(builder.edge_from(builder.start_node).to(Study), builder.node(Study))
graph = builder.build()


async def main() -> None:
    store = SQLiteStore("data/graphs.sqlite3")  # any store: files, PostgreSQL, MongoDB, Redis...
    deps = MemoryGraphDeps(memory=MemoryManager(store=store))
    runs = PersistentGraph(graph, store)
    try:  # a snapshot is stored after every node
        await runs.run(
            "tides-1", state=Research(["tides", "currents", "waves"]), deps=deps, inputs=Study()
        )
    except TimeoutError as exc:
        print("stopped:", exc)
    for snapshot in await runs.persistence("tides-1").async_load_all():
        print(snapshot.id, snapshot.status, snapshot.state.notes)

    # Later, in this process or another one: continue from the last snapshot.
    # (After a crash, the same call; take_over=True if the dead worker's claim is still live.)
    resumed = PersistentGraph(graph, SQLiteStore("data/graphs.sqlite3"))
    print(await resumed.resume("tides-1", deps=deps, retry=True))
    # notes on tides; notes on currents; notes on waves
    print(await deps.memory.async_get_fact("studied:waves"))  # True


asyncio.run(main())
