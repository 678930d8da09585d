"""Upstream's ``pipeline`` package, the part that carries memory: ``PipelineContext``.

``from firefly_orm.compat.firefly.pipeline import PipelineContext`` replaces
``from fireflyframework_agentic.pipeline import PipelineContext``.  Upstream's
DAG engine (``PipelineBuilder``, ``PipelineEngine``, the step classes) is not
reproduced: its place is pydantic-ai's graph library, whose runs
:class:`firefly_orm.pydantic_ai.graph.PersistentGraph` stores and resumes.  A
``PipelineContext`` is the deps of such a run, so its nodes reach the memory as
upstream's steps do (``ctx.deps.memory``); see
:mod:`firefly_orm.compat.firefly.pipeline.context`.
"""

from __future__ import annotations

from firefly_orm.compat.firefly.pipeline.context import PipelineContext

__all__ = ["PipelineContext"]
