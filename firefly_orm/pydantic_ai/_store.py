"""What a :class:`~firefly_orm.pydantic_ai.MemoryAgent` run gives its tools and stores.

:func:`run_deps` builds the deps of a started run (and the :class:`MemoryDeps`
its tools stage state in); :func:`store_turn` writes the run as one turn, with
its usage in the metadata and its staged state change in the turn's unit of
work (:mod:`firefly_orm.pydantic_ai._state`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic_ai.agent import AbstractAgent
from pydantic_ai.run import AgentRunResult

from firefly_orm.bridges._steps import Operation
from firefly_orm.conversation._model import ConversationTurn
from firefly_orm.pydantic_ai._result import MemoryDeps, response_text, usage_metadata
from firefly_orm.pydantic_ai._run import Prepared, Started
from firefly_orm.summarization import using_agent_model

__all__ = ["run_deps", "store_turn"]

logger = logging.getLogger("firefly_orm.pydantic_ai")


def run_deps(
    agent: AbstractAgent[Any, Any],
    deps_factory: Callable[[MemoryDeps], Any] | None,
    prepared: Prepared,
    conversation_id: str,
) -> tuple[Any, MemoryDeps]:
    """The agent's deps for a run on ``conversation_id``, and the run's :class:`MemoryDeps`.

    The deps given as ``deps=``, else ``deps_factory``'s (given a
    :class:`MemoryDeps`), else a :class:`MemoryDeps` when the agent's
    ``deps_type`` is one (a subclass: built with its other fields' defaults),
    else ``None``.  The :class:`MemoryDeps` returned is the one the run's
    tools stage state in: a ``deps=`` that is one (its staged state reset),
    else the one built for the run; either starts with the run's
    ``state_delta=``.
    """
    given = prepared.deps
    deps_type = agent.deps_type
    if isinstance(given, MemoryDeps):
        memory_deps = given
    elif (
        given is None
        and deps_factory is None
        and isinstance(deps_type, type)
        and issubclass(deps_type, MemoryDeps)
    ):
        memory_deps = deps_type(
            memory=prepared.memory, conversation_id=conversation_id, user_id=prepared.user_id
        )
        given = memory_deps
    else:
        memory_deps = MemoryDeps(prepared.memory, conversation_id, prepared.user_id)
        if given is None and deps_factory is not None:
            given = deps_factory(memory_deps)
    memory_deps._staged.reset(prepared.state_delta)
    return given, memory_deps


def store_turn(
    started: Started, result: AgentRunResult[Any], name: str | None, model: Any
) -> Operation[ConversationTurn]:
    """Store the run's new messages as one turn, with its usage in the metadata.

    ``name``: the agent's, recorded as ``"agent"``.  ``model``: the one a
    summarizer made with ``model=None`` asks.  The state the run staged (its
    ``state_delta=`` and its tools' :meth:`MemoryDeps.stage_state`) is written
    in the turn's unit of work.
    """
    prepared = started.prepared
    metadata: dict[str, Any] = {"usage": usage_metadata(result.usage), "run_id": result.run_id}
    if name is not None:
        metadata["agent"] = name
    new_messages = result.new_messages()
    state = started.memory_deps.staged_state
    with using_agent_model(model):
        turn = yield from prepared.memory._add_turn(
            started.conversation_id,
            prepared.text,
            response_text(result.output),
            new_messages,
            metadata=metadata,
            user_id=prepared.user_id,
            state_delta=state or None,
        )
    logger.debug(
        "conversation %r: stored turn %d (%d message(s), %d tokens used, %d state key(s))",
        started.conversation_id,
        turn.turn_id,
        len(new_messages),
        metadata["usage"]["total_tokens"],
        len(state),
    )
    return turn
