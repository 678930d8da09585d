"""The worker processes of the graph restart test: start a stored graph run, or resume one.

Run as ``python -m helpers.graph_worker SPEC`` with the repository and
``tests/`` on ``PYTHONPATH`` (``tests/integration/test_graph_restart.py``
does).  SPEC (JSON, from :func:`spec_for`) names a backend of the registry
(:mod:`store_backends`), the test's place, the run id and what to do:

* ``"start"``: run :func:`count_down_graph` from :data:`START`; the node at
  counter ``stall_at`` touches the file ``marker`` and then waits for ever
  (the test kills the process there with SIGKILL: :data:`STALL`);
* ``"resume"``: resume the run (``take_over`` as given) and print one JSON
  line: ``{"output": [...], "facts": {...}}``, or ``{"claimed": owner}`` when
  a live worker's claim refuses it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_graph import BaseNode, End, GraphBuilder, GraphRunContext
from store_backends import BACKENDS, OpenedBackend, Place

from firefly_orm import MemoryManager
from firefly_orm.pydantic_ai.graph import GraphRunClaimedError, MemoryGraphDeps, PersistentGraph

#: The counter a run starts from.
START = 4


@dataclass
class Countdown:
    """The graph state: the counter and what each node saw."""

    counter: int = START
    log: list[str] = field(default_factory=list)


#: (counter, marker file) of a starting worker: the node at that counter touches
#: the file and waits, before it changed anything (the test kills the process there).
STALL: tuple[int, str] | None = None


@dataclass
class Tick(BaseNode[Countdown, MemoryGraphDeps, list[str]]):
    """Logs and records the counter, counts down; ends with the log."""

    async def run(self, ctx: GraphRunContext[Countdown, MemoryGraphDeps]) -> Tick | End[list[str]]:
        if STALL is not None and ctx.state.counter == STALL[0]:
            Path(STALL[1]).touch()
            await asyncio.Event().wait()  # killed here
        ctx.state.log.append(f"tick {ctx.state.counter}")
        await ctx.deps.memory.async_set_fact(f"tick:{ctx.state.counter}", len(ctx.state.log))
        if ctx.state.counter == 0:
            return End(ctx.state.log)
        ctx.state.counter -= 1
        return Tick()


def count_down_graph() -> Any:
    """The graph both workers build (the same code: the same node ids)."""
    g = GraphBuilder(state_type=Countdown, deps_type=MemoryGraphDeps, output_type=list[str])
    g.add(g.edge_from(g.start_node).to(Tick), g.node(Tick))
    return g.build()


def spec_for(opened: OpenedBackend, run_id: str, action: str, **options: Any) -> str:
    """The SPEC argument that makes the script reopen ``opened``'s data and act on the run."""
    place = opened.place
    return json.dumps(
        {
            "backend": opened.name,
            "tmp_path": str(place.tmp_path),
            "name": place.name,
            "postgres_url": place.postgres_url,
            "run_id": run_id,
            "action": action,
            **options,
        }
    )


async def act(store: Any, spec: dict[str, Any]) -> dict[str, Any] | None:
    """Start or resume the run of ``spec`` on ``store``."""
    memory = MemoryManager(store=store, working_scope_id="graph-restart")
    deps = MemoryGraphDeps(memory=memory)
    runner = PersistentGraph(count_down_graph(), store)
    if spec["action"] == "start":
        global STALL
        STALL = (spec["stall_at"], spec["marker"])
        await runner.run(spec["run_id"], state=Countdown(), deps=deps, inputs=Tick())
        return None
    try:
        output = await runner.resume(spec["run_id"], deps=deps, take_over=spec["take_over"])
    except GraphRunClaimedError as exc:
        return {"claimed": exc.owner}
    facts = {k: await memory.async_get_fact(k) for k in await memory.working.async_keys()}
    return {"output": output, "facts": facts}


def main(argv: Sequence[str]) -> None:
    """Do what SPEC says."""
    (raw,) = argv
    spec = json.loads(raw)
    backend = BACKENDS[spec["backend"]]
    place = Place(
        tmp_path=Path(spec["tmp_path"]), name=spec["name"], postgres_url=spec["postgres_url"]
    )
    store = backend.open(place)
    try:
        report = asyncio.run(act(store, spec))
        if report is not None:
            print(json.dumps(report), flush=True)
    finally:
        if backend.close is not None:
            backend.close(store)


if __name__ == "__main__":
    main(sys.argv[1:])
