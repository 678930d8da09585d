"""A router over :func:`~firefly_orm.pydantic_ai.delegate`: each task to the sub-agent picked.

:class:`~firefly_orm.pydantic_ai.DelegationRouter` (:class:`RouterCore` here;
the package adds how a sub-agent runs) holds a pool of sub-agents (:class:`SubAgent`: a
pydantic-ai agent, its name and a description of what it does) and a
:class:`DelegationStrategy`.  Each sub-agent runs as
``delegate(memory, agent, name=name)`` does: a :class:`MemoryAgent` on its own
fork of the memory (working scope ``delegation:<name>``), sharing the store,
the conversations and the long-term memory, its facts its own.  A route picks
one sub-agent for the task and runs it; the stored turn names it
(``metadata["agent"]``).

Strategies:

* :class:`RoundRobinStrategy`: each in turn, in the pool's order;
* :class:`CapabilityStrategy`: the sub-agent whose description (and name and
  tags) shares the most words with the task, by the word rules and the score
  of firefly_orm's full-text search (:mod:`firefly_orm._search`: the share of
  the task's words found); ``required_tag=`` keeps only sub-agents with that
  tag;
* :class:`ModelChoiceStrategy`: a pydantic-ai agent on a model reads the task
  and the sub-agents' descriptions and answers with structured output naming
  one (pydantic-ai validates the name and asks again when it is not one of
  them).

Every route has a sync form (``route_sync``, ``choose``) and an async one
(``route``, ``async_choose``); a strategy that calls a model never blocks the
event loop in the async form.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar, cast, runtime_checkable

from pydantic import BaseModel, Field, create_model
from pydantic_ai import Agent
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.messages import UserContent
from pydantic_ai.models import Model

from firefly_orm._search import SearchRequest, text_terms, tokenised_score
from firefly_orm.errors import DelegationError
from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai._result import MemoryRunResult, prompt_text

__all__ = [
    "CapabilityStrategy",
    "DelegationError",
    "DelegationStrategy",
    "ModelChoiceStrategy",
    "RoundRobinStrategy",
    "RouterCore",
    "SubAgent",
    "SubAgentRunner",
]

logger = logging.getLogger("firefly_orm.pydantic_ai")


@dataclass(frozen=True)
class SubAgent:
    """One sub-agent of a :class:`DelegationRouter`.

    Attributes:
        agent: The pydantic-ai agent.
        name: Unique in the router: its working scope is ``delegation:<name>``
            and its turns carry ``metadata["agent"] = name``.
        description: What it does; the capability and model strategies read it.
        tags: Capabilities it declares (``CapabilityStrategy(required_tag=...)``).
    """

    agent: AbstractAgent[Any, Any]
    name: str
    description: str = ""
    tags: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not isinstance(self.agent, AbstractAgent):
            raise TypeError(f"agent must be a pydantic-ai agent, got {type(self.agent).__name__}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise DelegationError("a sub-agent needs a non-blank name")
        if not isinstance(self.description, str):
            raise TypeError("description must be a str")
        object.__setattr__(self, "tags", frozenset(self.tags))

    @classmethod
    def of(cls, agent: SubAgent | AbstractAgent[Any, Any]) -> SubAgent:
        """``agent`` itself, or a pydantic-ai agent with its own ``name`` and ``description``."""
        if isinstance(agent, SubAgent):
            return agent
        if not isinstance(agent, AbstractAgent):
            raise TypeError(
                f"a sub-agent is a SubAgent or a pydantic-ai agent, got {type(agent).__name__}"
            )
        if not agent.name:
            raise DelegationError(
                "a pydantic-ai agent in a router needs a name: Agent(..., name=...), "
                "or SubAgent(agent, name=...)"
            )
        return cls(agent, agent.name, agent.description or "")

    @property
    def profile(self) -> str:
        """The text the strategies match: name, description and tags."""
        return " ".join([self.name, self.description, *sorted(self.tags)])


class SubAgentRunner(Protocol):
    """What runs a routed sub-agent (its :class:`~firefly_orm.pydantic_ai.MemoryAgent`)."""

    async def run(
        self, user_prompt: str | Sequence[UserContent], **kwargs: Any
    ) -> MemoryRunResult[Any]:
        """Run it (async)."""
        ...

    def run_sync(
        self, user_prompt: str | Sequence[UserContent], **kwargs: Any
    ) -> MemoryRunResult[Any]:
        """Run it (sync)."""
        ...


@runtime_checkable
class DelegationStrategy(Protocol):
    """Picks the sub-agent that takes a task.

    ``select`` is called from sync code, ``async_select`` from async code; both
    get the pool (never empty) and the task's text and return one of the pool.
    """

    def select(self, agents: Sequence[SubAgent], task: str) -> SubAgent:
        """The sub-agent for ``task`` (sync form)."""
        ...

    async def async_select(self, agents: Sequence[SubAgent], task: str) -> SubAgent:
        """The sub-agent for ``task`` (async form)."""
        ...


class _LocalStrategy:
    """A strategy that needs no I/O: the async form is the sync one."""

    def select(self, agents: Sequence[SubAgent], task: str) -> SubAgent:
        raise NotImplementedError  # pragma: no cover - every subclass defines it

    async def async_select(self, agents: Sequence[SubAgent], task: str) -> SubAgent:
        """The same choice as :meth:`select` (nothing to wait for)."""
        return self.select(agents, task)


class RoundRobinStrategy(_LocalStrategy):
    """Each sub-agent in turn, in the pool's order, then the first again (thread-safe)."""

    def __init__(self) -> None:
        self._turns = itertools.count()
        self._lock = threading.Lock()

    def select(self, agents: Sequence[SubAgent], task: str) -> SubAgent:
        """The next sub-agent of the rotation (``task`` is not read)."""
        with self._lock:
            return agents[next(self._turns) % len(agents)]


class CapabilityStrategy(_LocalStrategy):
    """The sub-agent whose description best matches the task (full-text word match).

    The task and each sub-agent's :attr:`SubAgent.profile` (name, description,
    tags) are split into words by firefly_orm's search rules (case folded,
    punctuation ignored, :func:`~firefly_orm._search.query_terms`); a sub-agent
    scores the share of the task's words its profile holds
    (:func:`~firefly_orm._search.tokenised_score`).  The best score wins, the
    earlier sub-agent on a tie.

    Args:
        required_tag: Only sub-agents with this tag (upstream's
            ``CapabilityStrategy(required_tag)``); among several, the best match.
        min_score: A match needs a score above this (scores are in 0-1;
            default 0.0: one shared word is a match).
        fallback: The name of the sub-agent that takes a task nothing matches;
            ``None``: such a task raises :class:`DelegationError`.
    """

    def __init__(
        self,
        required_tag: str | None = None,
        *,
        min_score: float = 0.0,
        fallback: str | None = None,
    ) -> None:
        if not 0.0 <= min_score <= 1.0:
            raise ValueError(f"min_score must be within 0.0-1.0, got {min_score!r}")
        self.required_tag = required_tag
        self.min_score = min_score
        self.fallback = fallback

    def scores(self, agents: Sequence[SubAgent], task: str) -> list[tuple[SubAgent, float]]:
        """Each eligible sub-agent with its score for ``task``, in the pool's order."""
        eligible = [a for a in agents if self.required_tag is None or self.required_tag in a.tags]
        request = SearchRequest.build("delegation", task, limit=None)
        if not request.terms:
            return [(agent, 0.0) for agent in eligible]
        wanted = set(request.terms)
        return [
            (agent, tokenised_score(len(wanted & text_terms(agent.profile)), request))
            for agent in eligible
        ]

    def select(self, agents: Sequence[SubAgent], task: str) -> SubAgent:
        """The best-matching sub-agent (see the class docstring)."""
        scored = self.scores(agents, task)
        if not scored:
            raise DelegationError(f"no sub-agent has the tag {self.required_tag!r}")
        best, best_score = scored[0][0], self.min_score
        for agent, score in scored:
            if score > best_score:
                best, best_score = agent, score
        if best_score > self.min_score:
            return best
        if self.fallback is not None:
            return _named(agents, self.fallback)
        if self.required_tag is not None:
            return scored[0][0]  # upstream's rule: the first sub-agent with the tag
        raise DelegationError(
            "no sub-agent's description matches the task (give CapabilityStrategy a fallback=)"
        )


class ModelChoiceStrategy:
    """A model picks the sub-agent: a pydantic-ai agent with structured output.

    The model gets the task and a numbered list of the sub-agents (name and
    description) and must answer with an object ``{"name": ..., "reason": ...}``
    whose ``name`` is one of them (a JSON-schema enum; pydantic-ai validates
    the answer and asks again, up to ``retries`` times, when it is not).

    Args:
        model: A pydantic-ai model or model name (``"openai:gpt-4o-mini"``).
        instructions: Replaces the default instructions of the choosing agent.
        retries: How many times a wrong answer is sent back to the model.
    """

    DEFAULT_INSTRUCTIONS = (
        "You route a task to the one sub-agent best suited to it. Read the task and the "
        "sub-agents' descriptions, then answer with that sub-agent's name and a short reason."
    )

    def __init__(
        self, model: str | Model, *, instructions: str | None = None, retries: int = 2
    ) -> None:
        if isinstance(model, str) and not model.strip():
            raise ValueError("model must be a model name or a pydantic-ai Model")
        self.model = model
        self.instructions = instructions if instructions is not None else self.DEFAULT_INSTRUCTIONS
        self.retries = retries
        #: The reason the model gave for its last choice.
        self.last_reason: str | None = None

    def chooser(self, agents: Sequence[SubAgent]) -> Agent[None, BaseModel]:
        """The pydantic-ai agent that chooses among ``agents`` (its output names one)."""
        names = tuple(agent.name for agent in agents)
        choice: type[BaseModel] = create_model(
            "SubAgentChoice",
            name=(cast(Any, Literal[names]), Field(description="The chosen sub-agent's name")),
            reason=(str, Field(description="Why it suits the task, in one sentence")),
        )
        return Agent(
            self.model,
            output_type=choice,
            instructions=self.instructions,
            retries=self.retries,
            name="delegation-router",
        )

    @staticmethod
    def prompt(agents: Sequence[SubAgent], task: str) -> str:
        """The user prompt the choosing agent gets."""
        listed = "\n".join(
            f"{number}. {agent.name}: {agent.description or '(no description)'}"
            for number, agent in enumerate(agents, start=1)
        )
        return f"Task:\n{task}\n\nSub-agents:\n{listed}"

    def _chosen(self, agents: Sequence[SubAgent], output: BaseModel) -> SubAgent:
        data = output.model_dump()
        self.last_reason = str(data["reason"])
        chosen = _named(agents, str(data["name"]))
        logger.debug("model chose sub-agent %r: %s", chosen.name, self.last_reason)
        return chosen

    def select(self, agents: Sequence[SubAgent], task: str) -> SubAgent:
        """Ask the model (pydantic-ai's ``run_sync``)."""
        result = self.chooser(agents).run_sync(self.prompt(agents, task))
        return self._chosen(agents, result.output)

    async def async_select(self, agents: Sequence[SubAgent], task: str) -> SubAgent:
        """Ask the model without blocking the event loop."""
        result = await self.chooser(agents).run(self.prompt(agents, task))
        return self._chosen(agents, result.output)


def _named(agents: Sequence[SubAgent], name: str) -> SubAgent:
    for agent in agents:
        if agent.name == name:
            return agent
    raise DelegationError(f"no sub-agent is named {name!r}")


RunnerT = TypeVar("RunnerT", bound=SubAgentRunner)


class RouterCore(Generic[RunnerT]):
    """What :class:`~firefly_orm.pydantic_ai.DelegationRouter` does, but how a sub-agent runs.

    The subclass gives :meth:`_delegate` (``delegate()``, which lives with
    ``MemoryAgent`` in the package: this module does not import it).
    """

    def __init__(
        self,
        agents: Sequence[SubAgent | AbstractAgent[Any, Any]],
        strategy: DelegationStrategy,
        *,
        memory: MemoryManager | None = None,
        **options: Any,
    ) -> None:
        pool = tuple(SubAgent.of(agent) for agent in agents)
        if not pool:
            raise DelegationError("a router needs at least one sub-agent")
        names = [agent.name for agent in pool]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise DelegationError(f"sub-agent names must be unique; repeated: {repeated}")
        if not isinstance(strategy, DelegationStrategy):
            raise TypeError("strategy must have select() and async_select() (DelegationStrategy)")
        self._agents = pool
        self._strategy = strategy
        self._memory = memory if memory is not None else MemoryManager()
        self._runners = {agent.name: self._delegate(self._memory, agent, options) for agent in pool}

    def _delegate(
        self, memory: MemoryManager, agent: SubAgent, options: Mapping[str, Any]
    ) -> RunnerT:
        """The runner of ``agent``: a MemoryAgent on its fork of ``memory``."""
        raise NotImplementedError  # pragma: no cover - DelegationRouter defines it

    @property
    def agents(self) -> tuple[SubAgent, ...]:
        """The pool, in order."""
        return self._agents

    @property
    def strategy(self) -> DelegationStrategy:
        """The strategy that picks the sub-agents."""
        return self._strategy

    @property
    def memory(self) -> MemoryManager:
        """The manager the sub-agents' forks come from."""
        return self._memory

    def memory_agent(self, name: str) -> RunnerT:
        """The :class:`~firefly_orm.pydantic_ai.MemoryAgent` that runs sub-agent ``name``."""
        try:
            return self._runners[name]
        except KeyError:
            raise DelegationError(f"no sub-agent is named {name!r}") from None

    def __repr__(self) -> str:
        return (
            f"DelegationRouter(agents={[a.name for a in self._agents]!r}, "
            f"strategy={type(self._strategy).__name__})"
        )

    def _checked(self, chosen: SubAgent, task: str) -> SubAgent:
        if chosen not in self._agents:
            raise DelegationError(f"the strategy chose {chosen!r}, which is not in the pool")
        logger.info(
            "delegation: %r takes the task (%s)", chosen.name, type(self._strategy).__name__
        )
        return chosen

    def choose(self, prompt: str | Sequence[UserContent]) -> SubAgent:
        """The sub-agent the strategy picks for ``prompt`` (sync form; nothing runs)."""
        task = prompt_text(prompt)
        return self._checked(self._strategy.select(self._agents, task), task)

    async def async_choose(self, prompt: str | Sequence[UserContent]) -> SubAgent:
        """Async form of :meth:`choose`."""
        task = prompt_text(prompt)
        return self._checked(await self._strategy.async_select(self._agents, task), task)

    async def route(
        self, prompt: str | Sequence[UserContent], **run_kwargs: Any
    ) -> MemoryRunResult[Any]:
        """Pick a sub-agent for ``prompt`` and run it on its fork of the memory.

        Args:
            prompt: The task.
            **run_kwargs: :meth:`MemoryAgent.run <firefly_orm.pydantic_ai.MemoryAgent.run>`'s
                arguments (``conversation_id``, ``user_id``, ``deps``, ``model``...).

        Returns:
            The sub-agent's :class:`~firefly_orm.pydantic_ai.MemoryRunResult`;
            ``result.turn.metadata["agent"]`` names it.
        """
        chosen = await self.async_choose(prompt)
        return await self._runners[chosen.name].run(prompt, **run_kwargs)

    def route_sync(
        self, prompt: str | Sequence[UserContent], **run_kwargs: Any
    ) -> MemoryRunResult[Any]:
        """Sync form of :meth:`route` (the sub-agent's ``run_sync``)."""
        chosen = self.choose(prompt)
        return self._runners[chosen.name].run_sync(prompt, **run_kwargs)
