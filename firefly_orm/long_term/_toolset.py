"""The pydantic-ai toolset the agent tools are served in (long-term and knowledge tools).

pydantic-ai is imported only when a toolset is built; callers check the extra first
(raising :class:`~firefly_orm.errors.MissingExtraError` under their own name).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from pydantic_ai.toolsets import FunctionToolset

__all__ = ["function_toolset"]


def function_toolset(*tools: Callable[..., Any]) -> FunctionToolset[Any]:
    """A ``FunctionToolset`` of ``tools`` (no run context; Google docstrings, every
    parameter described)."""
    from pydantic_ai.toolsets import FunctionToolset

    toolset: FunctionToolset[Any] = FunctionToolset(
        docstring_format="google", require_parameter_descriptions=True
    )
    for tool in tools:
        toolset.add_function(tool, takes_ctx=False)
    return toolset
