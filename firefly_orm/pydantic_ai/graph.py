"""Graph runs that survive a restart, and memory in a graph's deps (``pydantic_graph``).

pydantic-ai's graph library (``pydantic_graph``, installed with the
``pydantic-ai`` extra) runs multi-step pipelines and reasoning loops as graphs
of typed steps.  Since its 2.0 release it keeps no state of its own between
processes (its ``persistence`` package was removed); this module gives a run
that state on any firefly_orm store:

* :class:`PersistentGraph` wraps a built ``pydantic_graph.Graph``:
  ``await PersistentGraph(graph, store).run(run_id, state=..., deps=...,
  inputs=...)`` runs it and stores a :class:`Snapshot` after every node (the
  graph state and the nodes still to run), each in one unit of work;
  ``await ....resume(run_id, deps=...)`` in another process, after a crash or
  a restart, continues from the last snapshot: the nodes that had not finished
  run again with the state they started from.  A run that ended gives back its
  output.
* :class:`GraphPersistence` is the snapshot store of one run, the contract the
  runner is written on (status changes, claims, reads), usable on its own:
  :meth:`~GraphPersistence.snapshot_node`, :meth:`~GraphPersistence.snapshot_end`,
  :meth:`~GraphPersistence.load_next`, :meth:`~GraphPersistence.record_run`,
  :meth:`~GraphPersistence.load_all`, :meth:`~GraphPersistence.set_graph_types`,
  each with its ``async_`` twin.
* :class:`MemoryGraphDeps` is a deps type that hands every node the
  :class:`~firefly_orm.manager.MemoryManager`: ``ctx.deps.memory``.

**Where the rows live.**  Run ``<run_id>`` is the namespace ``graph:<run_id>``:
a run row and one row per snapshot (:mod:`firefly_orm.pydantic_ai._graph_rows`),
so every store works: :class:`~firefly_orm.store.InMemoryStore`,
:class:`~firefly_orm.file_store.FileStore`, SQLite, PostgreSQL, MongoDB, Redis.

**Snapshot statuses.**  ``created`` → ``pending`` (claimed by a worker,
:meth:`~GraphPersistence.load_next`) → ``running``
(:meth:`~GraphPersistence.record_run`) → ``success`` or ``error``; an end
snapshot is stored ``success``.  Each change is a compare-and-set on the run
row: two workers resuming one run never both get the same snapshot (the loser
gets ``None`` from ``load_next``, or :class:`GraphRunClaimedError` from
``resume``).  A claim is a lease (``lease_seconds``, 60 by default) that the
runner renews while its nodes run; a worker killed mid-node leaves a claim
that lapses, after which any worker may resume the run, or at once with
``resume(..., take_over=True)`` when that worker is known to be gone.
Leases compare the workers' wall clocks.

**What is replayed.**  A snapshot is taken when every node still to run is
outside a fork (``pydantic_graph``'s parallel branches): the branches of a fork
and their join count as one step, and a run killed inside a fork resumes at
the step that opened it.  A resumed run first replays the start node's edges
with the run's stored inputs (their result is dropped) to open a
``pydantic_graph`` run.  State and node inputs are stored as JSON through
pydantic: the state as the graph's ``state_type``, ``BaseNode`` nodes as their
class, the end node's input as the ``output_type``, a function step's input as
a JSON value unless ``input_types={"step_id": type}`` names its type.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from types import NoneType
from typing import Any, Literal

import pydantic_core
from pydantic import TypeAdapter
from pydantic_graph import EndMarker, Graph, GraphRun, GraphTaskRequest
from pydantic_graph.id_types import NodeID
from pydantic_graph.node import EndNode
from pydantic_graph.step import NodeStep

from firefly_orm.bridges._steps import (
    MemoryLayer,
    Operation,
    Transaction,
    async_method,
    retrying,
    sync_method,
)
from firefly_orm.bridges._steps import arun as _arun
from firefly_orm.bridges._steps import run as _run
from firefly_orm.entry import utcnow
from firefly_orm.errors import EntryValidationError
from firefly_orm.manager import MemoryManager
from firefly_orm.protocols import MemoryStore, UnitOfWork
from firefly_orm.pydantic_ai._graph_rows import (
    GRAPH_NAMESPACE_PREFIX,
    GraphRunClaimedError,
    GraphRunExistsError,
    GraphRunNotFoundError,
    PendingNode,
    Snapshot,
    SnapshotKind,
    SnapshotStatus,
    SnapshotStatusError,
    Transition,
    add_snapshot,
    claim_next,
    create_run,
    graph_namespace,
    read_run,
    read_snapshots,
    transition,
)
from firefly_orm.store import InMemoryStore

__all__ = [
    "GRAPH_NAMESPACE_PREFIX",
    "GraphPersistence",
    "GraphRunClaimedError",
    "GraphRunExistsError",
    "GraphRunNotFoundError",
    "MemoryGraphDeps",
    "PendingNode",
    "PersistentGraph",
    "Snapshot",
    "SnapshotKind",
    "SnapshotStatus",
    "SnapshotStatusError",
]

logger = logging.getLogger("firefly_orm")

_ANY: TypeAdapter[Any] = TypeAdapter(Any)
#: The default lease of a claim, in seconds (renewed every third of it while nodes run).
DEFAULT_LEASE_SECONDS = 60.0


@dataclass(frozen=True)
class MemoryGraphDeps:
    """Deps that give every node of a graph the memory: ``ctx.deps.memory``.

    Build the graph with ``GraphBuilder(deps_type=MemoryGraphDeps, ...)`` (or
    subclass it to add your own fields) and pass one per run::

        @g.step
        async def remember(ctx: StepContext[State, MemoryGraphDeps, str]) -> str:
            await ctx.deps.memory.async_set_fact("topic", ctx.inputs)
            return ctx.inputs

        await PersistentGraph(graph, store).run(
            "run-1", state=State(), deps=MemoryGraphDeps(memory=manager), inputs="tides"
        )

    Deps are not stored with the run: pass them again to
    :meth:`PersistentGraph.resume`.

    Attributes:
        memory: The manager the nodes use (its ``async_`` methods, as nodes run
            on the event loop).
        conversation_id: The conversation the run works for, if any.
    """

    memory: MemoryManager
    conversation_id: str | None = None


def _default_owner() -> str:
    """A worker name: host, process and a random part (unique per persistence)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _check_lease(lease_seconds: Any) -> float:
    if (
        isinstance(lease_seconds, bool)
        or not isinstance(lease_seconds, int | float)
        or not lease_seconds > 0
        or lease_seconds == float("inf")
    ):
        raise EntryValidationError("lease_seconds", "must be a positive finite number")
    return float(lease_seconds)


class GraphPersistence(MemoryLayer):
    """The snapshots of one graph run in a store: what :class:`PersistentGraph` runs on.

    Args:
        store: Where the run lives (default: a new :class:`InMemoryStore`).
        run_id: The run (namespace ``graph:<run_id>``); default a new random id.
        lease_seconds: How long a claim holds without being renewed.
        owner: This worker's name in claims (default: host, pid, random part).

    Raises:
        EntryValidationError: A bad ``run_id`` or ``lease_seconds``.
    """

    def __init__(
        self,
        store: MemoryStore | None = None,
        *,
        run_id: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        owner: str | None = None,
    ) -> None:
        super().__init__(store if store is not None else InMemoryStore())
        self._run_id = run_id if run_id is not None else uuid.uuid4().hex
        self._namespace = graph_namespace(self._run_id)
        self._lease = timedelta(seconds=_check_lease(lease_seconds))
        self._owner = owner if owner is not None else _default_owner()
        self._state_type: TypeAdapter[Any] = _ANY
        self._output_type: TypeAdapter[Any] = _ANY
        self._node_types: dict[str, TypeAdapter[Any]] = {}

    def __repr__(self) -> str:
        return f"GraphPersistence(run_id={self._run_id!r}, store={type(self.store).__name__})"

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._run_id

    @property
    def namespace(self) -> str:
        """The run's namespace: ``graph:<run_id>``."""
        return self._namespace

    @property
    def owner(self) -> str:
        """This worker's name in the claims it makes."""
        return self._owner

    @property
    def lease_seconds(self) -> float:
        """How long a claim holds without being renewed."""
        return self._lease.total_seconds()

    # ------------------------------------------------------------------ types

    def set_types(self, state_type: Any = Any, output_type: Any = Any) -> None:
        """The types the state and the output are stored and read back as (pydantic)."""
        self._state_type = TypeAdapter(state_type)
        self._output_type = TypeAdapter(output_type)

    def set_graph_types(
        self, graph: Graph, *, input_types: Mapping[str, Any] | None = None
    ) -> None:
        """Take the state, output and node input types from ``graph``.

        ``BaseNode`` steps store their node object as its class, the end node its
        input as the graph's output type; ``input_types`` maps other step ids to
        their input type (the rest are stored as JSON values).

        Raises:
            EntryValidationError: ``input_types`` names a node the graph lacks.
        """
        self.set_types(graph.state_type, graph.output_type)
        types: dict[str, TypeAdapter[Any]] = {}
        for node_id, node in graph.nodes.items():
            if isinstance(node, NodeStep):
                types[node_id] = TypeAdapter(node.node_type)
            elif isinstance(node, EndNode):
                types[node_id] = self._output_type
        for step_id, kind in (input_types or {}).items():
            if step_id not in graph.nodes:
                raise EntryValidationError("input_types", f"the graph has no node {step_id!r}")
            types[step_id] = TypeAdapter(kind)
        self._node_types = types

    def _dump(self, adapter: TypeAdapter[Any], value: Any) -> Any:
        if adapter is _ANY:
            return pydantic_core.to_jsonable_python(value)
        return adapter.dump_python(value, mode="json")

    def _node(self, node_id: str) -> TypeAdapter[Any]:
        return self._node_types.get(node_id, _ANY)

    def _stored(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with its values in their stored (JSON) form."""
        end = snapshot.kind == "end"
        return replace(
            snapshot,
            state=self._dump(self._state_type, snapshot.state),
            nodes=tuple(
                PendingNode(n.node_id, self._dump(self._node(n.node_id), n.inputs))
                for n in snapshot.nodes
            ),
            output=self._dump(self._output_type, snapshot.output) if end else None,
        )

    def _loaded(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with its values read back as their types."""
        end = snapshot.kind == "end"
        return replace(
            snapshot,
            state=self._state_type.validate_python(snapshot.state),
            nodes=tuple(
                PendingNode(n.node_id, self._node(n.node_id).validate_python(n.inputs))
                for n in snapshot.nodes
            ),
            output=self._output_type.validate_python(snapshot.output) if end else None,
        )

    def _new(
        self,
        kind: SnapshotKind,
        state: Any,
        nodes: Sequence[PendingNode] = (),
        output: Any = None,
        status: SnapshotStatus = "created",
    ) -> Snapshot:
        if kind == "node" and not nodes:
            raise EntryValidationError("nodes", "a node snapshot needs at least one node")
        for node in nodes:
            if not isinstance(node, PendingNode):
                raise EntryValidationError("nodes", f"expected PendingNode, got {node!r}")
        return self._stored(Snapshot("", kind, status, state, tuple(nodes), output))

    def _change(
        self,
        snapshot_id: str,
        to: Literal["running", "success", "error", "renew"],
        *,
        error: str | None = None,
        then: Snapshot | None = None,
    ) -> Transition:
        if not isinstance(snapshot_id, str):
            raise EntryValidationError("snapshot_id", "must be a string")
        return Transition(snapshot_id, self._owner, to, self._lease, error, then)

    # ------------------------------------------------------------------ operations

    def _snapshot_node(self, state: Any, nodes: Sequence[PendingNode]) -> Operation[Snapshot]:
        """Store a ``created`` snapshot: ``state`` and the ``nodes`` still to run.

        Raises:
            GraphRunNotFoundError: The run was never started
                (:meth:`begin` / :meth:`PersistentGraph.run` start it).
        """
        snapshot = self._new("node", state, nodes)
        stored = yield from retrying(Transaction.write(add_snapshot, self._namespace, snapshot))
        return self._loaded(stored)

    def _snapshot_end(self, state: Any, output: Any) -> Operation[Snapshot]:
        """Store the run's end: the final ``state`` and ``output`` (status ``success``)."""
        snapshot = self._new("end", state, output=output, status="success")
        stored = yield from retrying(Transaction.write(add_snapshot, self._namespace, snapshot))
        return self._loaded(stored)

    def _begin(
        self, state: Any, nodes: Sequence[PendingNode], *, inputs: Any = None
    ) -> Operation[Snapshot]:
        """Start the run: store its ``inputs`` and its first snapshot, claimed by this worker.

        Raises:
            GraphRunExistsError: The run was already started.
        """
        first = self._new("node", state, nodes, status="pending")
        first = replace(first, owner=self._owner, lease_until=utcnow() + self._lease)
        stored = yield from Transaction.write(
            create_run, self._namespace, None, pydantic_core.to_jsonable_python(inputs), first
        )
        return self._loaded(stored)

    def _load_next(self, *, take_over: bool = False) -> Operation[Snapshot | None]:
        """Claim the oldest free node snapshot for this worker (``pending``), or ``None``.

        Free: ``created``, or held by a worker whose lease lapsed (any holder with
        ``take_over=True``).  Two workers never claim the same snapshot.

        Raises:
            GraphRunNotFoundError: No run with this id is stored.
        """
        claimed = yield from retrying(
            Transaction.write(
                claim_next, self._namespace, self._owner, self._lease, take_over=take_over
            )
        )
        return self._loaded(claimed) if claimed is not None else None

    def _load_all(self) -> Operation[list[Snapshot]]:
        """Every snapshot of the run, oldest first (``[]`` for a run never started)."""
        rows = yield from Transaction.read(read_snapshots, self._namespace)
        return [self._loaded(s) for s in rows]

    def _stored_inputs(self) -> Operation[Any]:
        """The inputs the run was started with (JSON form), or ``None``."""
        inputs = yield from Transaction.read(_read_inputs, self._namespace)
        return inputs

    def _start(self, snapshot_id: str) -> Operation[None]:
        """Mark a ``created`` or ``pending`` snapshot ``running`` for this worker.

        Raises:
            SnapshotStatusError: It is running or ran already, or another
                worker holds it.
        """
        yield from retrying(
            Transaction.write(transition, self._namespace, self._change(snapshot_id, "running"))
        )

    def _finish(
        self, snapshot_id: str, *, error: str | None = None, then: Snapshot | None = None
    ) -> Operation[Snapshot | None]:
        """Mark a running snapshot ``success`` (``error=None``) or ``error``; append ``then``.

        Raises:
            SnapshotStatusError: This worker no longer holds it.
        """
        change = self._change(
            snapshot_id, "error" if error is not None else "success", error=error, then=then
        )
        appended = yield from retrying(Transaction.write(transition, self._namespace, change))
        return self._loaded(appended) if appended is not None else None

    def _renew(self, snapshot_id: str) -> Operation[None]:
        """Extend this worker's claim of a pending or running snapshot by a lease.

        Raises:
            SnapshotStatusError: This worker no longer holds it.
        """
        yield from retrying(
            Transaction.write(transition, self._namespace, self._change(snapshot_id, "renew"))
        )

    def _delete(self) -> Operation[None]:
        """Remove the run and every snapshot of it."""
        yield from Transaction.write(lambda uow: uow.entries.clear(self._namespace))

    snapshot_node = sync_method(_snapshot_node)
    async_snapshot_node = async_method(_snapshot_node)
    snapshot_end = sync_method(_snapshot_end)
    async_snapshot_end = async_method(_snapshot_end)
    begin = sync_method(_begin)
    async_begin = async_method(_begin)
    load_next = sync_method(_load_next)
    async_load_next = async_method(_load_next)
    load_all = sync_method(_load_all)
    async_load_all = async_method(_load_all)
    start = sync_method(_start)
    async_start = async_method(_start)
    finish = sync_method(_finish)
    async_finish = async_method(_finish)
    renew = sync_method(_renew)
    async_renew = async_method(_renew)
    delete = sync_method(_delete)
    async_delete = async_method(_delete)
    stored_inputs = sync_method(_stored_inputs)
    async_stored_inputs = async_method(_stored_inputs)

    @contextlib.contextmanager
    def record_run(self, snapshot_id: str) -> Iterator[None]:
        """Run the block as the snapshot's nodes: ``running`` on entry, then ``success``
        or ``error`` (the block's exception, re-raised) with the time it took.

        Raises:
            SnapshotStatusError: On entry, as :meth:`start`.
        """
        _run(self.store, self._start(snapshot_id))
        try:
            yield
        except Exception as exc:
            _run(self.store, self._finish(snapshot_id, error=_describe(exc)))
            raise
        _run(self.store, self._finish(snapshot_id))

    @contextlib.asynccontextmanager
    async def async_record_run(self, snapshot_id: str) -> AsyncIterator[None]:
        """Async form of :meth:`record_run`."""
        await _arun(self.store, self._start(snapshot_id))
        try:
            yield
        except Exception as exc:
            await _arun(self.store, self._finish(snapshot_id, error=_describe(exc)))
            raise
        await _arun(self.store, self._finish(snapshot_id))


def _read_inputs(uow: UnitOfWork, namespace: str) -> Any:
    run = read_run(uow, namespace)
    return run.content.get("inputs") if run is not None else None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _top_level(tasks: Sequence[Any]) -> bool:
    """Whether every task is outside a fork (its fork stack holds only the start)."""
    return bool(tasks) and all(len(t.fork_stack) == 1 for t in tasks)


class PersistentGraph:
    """A ``pydantic_graph`` graph whose runs are stored in a firefly_orm store.

    Args:
        graph: A built ``pydantic_graph.Graph`` (``GraphBuilder(...).build()``).
        store: Where runs live (default: a new :class:`InMemoryStore`).
        lease_seconds: How long a worker's claim of a run holds unrenewed.
        input_types: Input types of function steps, by step id (see
            :meth:`GraphPersistence.set_graph_types`).
    """

    def __init__(
        self,
        graph: Graph,
        store: MemoryStore | None = None,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        input_types: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(graph, Graph):
            raise EntryValidationError("graph", "must be a built pydantic_graph Graph")
        self._graph = graph
        self._store = store if store is not None else InMemoryStore()
        self._lease_seconds = _check_lease(lease_seconds)
        self._input_types = dict(input_types or {})
        GraphPersistence().set_graph_types(graph, input_types=self._input_types)  # checks them

    @property
    def graph(self) -> Graph:
        """The wrapped graph."""
        return self._graph

    @property
    def store(self) -> MemoryStore:
        """Where the runs live."""
        return self._store

    def persistence(self, run_id: str, *, owner: str | None = None) -> GraphPersistence:
        """The :class:`GraphPersistence` of run ``run_id``, typed by this graph."""
        persistence = GraphPersistence(
            self._store, run_id=run_id, lease_seconds=self._lease_seconds, owner=owner
        )
        persistence.set_graph_types(self._graph, input_types=self._input_types)
        return persistence

    async def run(
        self, run_id: str, *, state: Any = None, deps: Any = None, inputs: Any = None
    ) -> Any:
        """Run the graph as run ``run_id``, a snapshot stored after every node; its output.

        Raises:
            GraphRunExistsError: ``run_id`` was already started (resume it).
            Exception: What a node raised (its snapshot is stored ``error``).
        """
        persistence = self.persistence(run_id)
        async with self._graph.iter(
            state=state, deps=deps, inputs=inputs, infer_name=False
        ) as graph_run:
            tasks = await anext(graph_run)  # the start node: edges only, no step ran
            first = await persistence.async_begin(state, _pending(tasks), inputs=inputs)
            logger.debug("graph run %r started", run_id)
            return await _drive(persistence, graph_run, first, state)

    async def resume(
        self, run_id: str, *, deps: Any = None, take_over: bool = False, retry: bool = False
    ) -> Any:
        """Continue run ``run_id`` from its last snapshot; the output of an ended run.

        ``take_over=True`` takes the run from a worker whose claim has not lapsed
        (use it only when that worker is known to be gone); ``retry=True`` runs
        again the nodes of a run whose last step failed.

        Raises:
            GraphRunNotFoundError: No such run.
            GraphRunClaimedError: A live worker runs it.
            SnapshotStatusError: Its last step failed (and ``retry`` is off).
        """
        persistence = self.persistence(run_id)
        claimed = await persistence.async_load_next(take_over=take_over)
        if claimed is None:
            done = await _settled(persistence, retry=retry)
            if isinstance(done, EndMarker):
                return done.value
            claimed = done
        state = claimed.state
        inputs = await persistence.async_stored_inputs()
        if self._graph.input_type is not NoneType:
            inputs = TypeAdapter(self._graph.input_type).validate_python(inputs)
        async with self._graph.iter(
            state=state, deps=deps, inputs=inputs, infer_name=False
        ) as graph_run:
            opening = graph_run.next_task  # the start node's task, not run yet
            assert isinstance(opening, Sequence)
            fork_stack = opening[0].fork_stack
            await anext(graph_run)  # open the run: the start node's edges, dropped
            graph_run.override_next(
                [GraphTaskRequest(NodeID(n.node_id), n.inputs, fork_stack) for n in claimed.nodes]
            )
            logger.info("graph run %r resumed at snapshot %s", run_id, claimed.id)
            return await _drive(persistence, graph_run, claimed, state)


def _pending(tasks: Any) -> list[PendingNode]:
    return [PendingNode(str(t.node_id), t.inputs) for t in tasks]


async def _settled(persistence: GraphPersistence, *, retry: bool) -> Snapshot | EndMarker:
    """Why nothing could be claimed: the end, a live claim, or a failed last step."""
    snapshots = await persistence.async_load_all()
    if not snapshots:
        raise GraphRunNotFoundError(persistence.run_id)
    last = snapshots[-1]
    if last.kind == "end":
        return EndMarker(last.output)
    if last.status in ("pending", "running"):
        raise GraphRunClaimedError(persistence.run_id, last.owner, last.lease_until)
    if not retry:
        raise SnapshotStatusError(
            f"graph run {persistence.run_id!r} failed at snapshot {last.id} ({last.error}): "
            "resume it with retry=True to run that step again"
        )
    await persistence.async_snapshot_node(last.state, last.nodes)
    again = await persistence.async_load_next()
    if again is None:  # another worker retried it first
        raise GraphRunClaimedError(persistence.run_id, None, None)
    return again


async def _heartbeat(persistence: GraphPersistence, snapshot_id: str) -> None:
    """Renew the claim every third of a lease until cancelled (stops if the claim is lost)."""
    while True:
        await asyncio.sleep(persistence.lease_seconds / 3)
        try:
            await persistence.async_renew(snapshot_id)
        except SnapshotStatusError:
            logger.warning(
                "graph run %r lost its claim of snapshot %s", persistence.run_id, snapshot_id
            )
            return


async def _drive(
    persistence: GraphPersistence,
    graph_run: GraphRun,
    current: Snapshot,
    state: Any,
) -> Any:
    """Run the graph from ``current`` (claimed, its nodes set as the run's next), a step at
    a time; each step's snapshot finished and the next one stored in one unit of work."""
    while True:
        await persistence.async_start(current.id)
        beat = asyncio.create_task(_heartbeat(persistence, current.id))
        try:
            event = await anext(graph_run)
            while not isinstance(event, EndMarker) and not _top_level(event):
                event = await anext(graph_run)
        except Exception as exc:
            await _stop(beat)
            try:
                await persistence.async_finish(current.id, error=_describe(exc))
            except SnapshotStatusError:  # another worker took the run over: its error now
                logger.warning(
                    "graph run %r: step %s failed after its claim was lost",
                    persistence.run_id,
                    current.id,
                )
            raise
        except BaseException:
            await _stop(beat)  # cancelled: the claim lapses, another worker resumes
            raise
        await _stop(beat)
        if isinstance(event, EndMarker):
            end = persistence._new("end", state, output=event.value, status="success")
            await persistence.async_finish(current.id, then=end)
            return event.value
        following = persistence._new("node", state, _pending(event), status="pending")
        appended = await persistence.async_finish(current.id, then=following)
        assert appended is not None
        current = appended


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it; a cancellation of the caller meanwhile is kept."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
