"""Upstream's ``agents.delegation``: the delegation router and its strategies, on firefly_orm.

``DelegationRouter(agents, strategy, *, memory=None)`` and ``await
router.route(prompt, **kwargs)`` keep upstream's shape;
:class:`~firefly_orm.pydantic_ai.DelegationRouter` does the work: each
sub-agent runs as a :class:`~firefly_orm.pydantic_ai.MemoryAgent` on its own
fork of the memory (working scope ``delegation:<name>``), its turn stored in
the conversation it runs on.  Differences from upstream:

* the agents are pydantic-ai agents built with ``name=`` (and
  ``description=``), or :class:`~firefly_orm.pydantic_ai.SubAgent` objects
  (which also carry ``tags``);
* ``CapabilityStrategy(required_tag)`` keeps the sub-agents with that tag and
  takes the one whose description best matches the prompt (the first with the
  tag when none does); without a tag it matches descriptions only;
* ``ContentBasedStrategy(model)`` asks the model for a structured answer (a
  sub-agent's name, validated and asked again when wrong) instead of reading
  a number out of free text, and never falls back silently to the first agent;
* a custom strategy implements ``select(agents, task)`` and
  ``async_select(agents, task)`` (:class:`DelegationStrategy`);
* ``route_sync`` is the sync form; ``CostAwareStrategy`` is not provided.
"""

from __future__ import annotations

from pydantic_ai.models import Model

from firefly_orm.errors import DelegationError
from firefly_orm.pydantic_ai import (
    CapabilityStrategy,
    DelegationRouter,
    DelegationStrategy,
    ModelChoiceStrategy,
    RoundRobinStrategy,
    SubAgent,
)

__all__ = [
    "CapabilityStrategy",
    "ContentBasedStrategy",
    "DelegationError",
    "DelegationRouter",
    "DelegationStrategy",
    "RoundRobinStrategy",
    "SubAgent",
]


class ContentBasedStrategy(ModelChoiceStrategy):
    """Upstream's model-picked routing: :class:`~firefly_orm.pydantic_ai.ModelChoiceStrategy`.

    Args:
        model: The choosing model (upstream's default, ``"openai:gpt-4o-mini"``).
    """

    def __init__(self, model: str | Model = "openai:gpt-4o-mini") -> None:
        super().__init__(model)
