"""Upstream's ``pipeline.context``: ``PipelineContext``, the deps of a graph run.

Upstream hands one context to every step of a pipeline: the pipeline's
inputs, free-form metadata, a correlation id for tracing, the optional
:class:`~firefly_orm.manager.MemoryManager` the steps share, and the results of
the steps that finished.  Here the same object is the deps of a
``pydantic_graph`` run::

    context = PipelineContext("summarise the tides", memory=manager)
    await PersistentGraph(graph, store).run("run-1", state=State(), deps=context)

    # in a node:
    await ctx.deps.memory.async_set_fact("topic", ctx.deps.inputs)
    ctx.deps.set_node_result("research", result)

The context lives in the process (as upstream's does): a resumed run gets the
context passed to :meth:`~firefly_orm.pydantic_ai.graph.PersistentGraph.resume`,
while what must survive a restart belongs in the graph state or the memory.
"""

from __future__ import annotations

import uuid
from typing import Any

from firefly_orm.manager import MemoryManager

__all__ = ["PipelineContext"]


class PipelineContext:
    """The inputs, metadata, memory and step results one pipeline run shares.

    Args:
        inputs: The pipeline's input (any value).
        metadata: Free-form key-value pairs (a new dict when omitted).
        correlation_id: Tracing id (default: a new 32-hex-character id).
        memory: The manager the steps share, or ``None``.
    """

    def __init__(
        self,
        inputs: Any = None,
        *,
        metadata: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        memory: MemoryManager | None = None,
    ) -> None:
        self.inputs = inputs
        self.metadata: dict[str, Any] = metadata if metadata is not None else {}
        self.correlation_id = correlation_id or uuid.uuid4().hex
        self.memory = memory
        self._results: dict[str, Any] = {}

    def set_node_result(self, node_id: str, result: Any) -> None:
        """Record what step ``node_id`` produced (replacing an earlier result)."""
        self._results[node_id] = result

    def get_node_result(self, node_id: str) -> Any:
        """What step ``node_id`` produced, or ``None``."""
        return self._results.get(node_id)

    def get_node_output(self, node_id: str, key: str = "output") -> Any:
        """One output of step ``node_id``: its result's ``output`` (``key="output"``), or
        the value under ``key`` when that output is a dict; ``None`` when there is none."""
        output = getattr(self._results.get(node_id), "output", None)
        if key == "output":
            return output
        return output.get(key) if isinstance(output, dict) else None

    @property
    def results(self) -> dict[str, Any]:
        """A copy of every recorded result, by step id."""
        return dict(self._results)

    def __repr__(self) -> str:
        return (
            f"PipelineContext(correlation_id={self.correlation_id!r}, "
            f"completed_nodes={list(self._results)})"
        )
