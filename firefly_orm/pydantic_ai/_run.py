"""One :class:`~firefly_orm.pydantic_ai.MemoryAgent` run, written once for its four forms.

``run``, ``run_sync``, ``run_stream`` and ``iter`` share their start-up and
their hold on the caller's session:

1. :func:`prepare` checks the arguments (no I/O);
2. :func:`start`, an operation, decides the conversation (the one given, the
   user's current one, or a new id: :func:`current_conversation`), reads the
   context of the model call, and ends the run's transaction in the caller's
   session before the model is called (:class:`RunHold`), also when the read
   failed;
3. the model is called: ``run`` / ``run_sync`` as one more step of the same
   operation (a :class:`~firefly_orm.bridges._steps.CallOut`: the agent's
   ``run_sync`` from sync code, its ``run`` from async code, driven by
   ``steps.run`` / ``steps.arun``); ``run_stream`` / ``iter`` inside the app's
   ``async with`` block;
4. the turn is written (the agent's ``_write``).

A run cancelled (or interrupted) before its write still ends the run's
transaction in the session (:meth:`RunHold.arelease_unless_writing`): the
step driver hands only ``Exception`` back to an operation.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import UserContent

from firefly_orm.bridges._release import SessionHold
from firefly_orm.bridges._release import _Release as Release
from firefly_orm.bridges._steps import Operation
from firefly_orm.conversation._model import check_conversation_id
from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge import KnowledgeGraph, knowledge_toolset
from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai._result import MemoryDeps, prompt_text
from firefly_orm.pydantic_ai._state import checked_state

__all__ = [
    "PYDANTIC_AI_NEW",
    "Prepared",
    "Release",
    "RunHold",
    "Started",
    "current_conversation",
    "prepare",
    "release_capabilities",
    "with_capabilities",
]

#: pydantic-ai reads this conversation id as "start a new conversation".
PYDANTIC_AI_NEW = "new"
#: Keyword arguments of the agent's run methods that memory supplies instead.
_SUPPLIED_BY_MEMORY = ("message_history", "conversation")


@dataclass(frozen=True)
class Prepared:
    """One run, checked: where it reads and writes, and what the agent gets.

    ``conversation_id`` ``None``: decided by :func:`current_conversation` when
    the run starts (``new_conversation``: a new one).  ``deps`` ``None``: built
    from the run's :class:`MemoryDeps` once the conversation is known.
    ``state_delta``: the run's ``state_delta=``, checked (JSON copies).
    """

    memory: MemoryManager
    conversation_id: str | None
    new_conversation: bool
    user_id: str | None
    prompt: str | Sequence[UserContent]
    text: str
    deps: Any
    agent_kwargs: dict[str, Any]
    state_delta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Started:
    """A run whose conversation is decided and whose context is read.

    ``memory_deps``: the :class:`MemoryDeps` the run's tools stage state in
    (its staged state is stored with the turn).
    """

    prepared: Prepared
    conversation_id: str
    deps: Any
    history: list[Any]
    memory_deps: MemoryDeps

    def agent_arguments(self, added: list[Any]) -> dict[str, Any]:
        """The keyword arguments of the agent's run method (after the prompt)."""
        return {
            "message_history": self.history,
            "conversation_id": self.conversation_id,
            "deps": self.deps,
            **with_capabilities(self.prepared.agent_kwargs, added),
        }


@dataclass
class RunHold:
    """A run's :class:`SessionHold`, and whether the run's write has begun."""

    hold: SessionHold
    writing: bool = field(default=False)

    def release_unless_writing(self) -> None:
        """After a run left by a ``BaseException`` (sync): end the read's transaction."""
        if not self.writing:
            self.hold.release()

    async def arelease_unless_writing(self) -> None:
        """After a run left by a ``BaseException`` (async): end the read's transaction."""
        if not self.writing:
            await self.hold.arelease()


def prepare(
    memory: MemoryManager,
    user_prompt: str | Sequence[UserContent],
    conversation_id: str | None,
    new_conversation: bool,
    deps: Any,
    agent_kwargs: Mapping[str, Any],
    state_delta: Mapping[str, Any] | None = None,
) -> Prepared:
    """Check a run's arguments (no I/O); ``memory`` is the run's user's manager.

    Raises:
        TypeError: ``message_history`` / ``conversation`` among the agent's
            arguments, no prompt, or ``new_conversation`` not a bool.
        EntryValidationError: A bad conversation id, ``conversation_id`` with
            ``new_conversation=True``, ``deps`` of another user's memory, or a
            bad ``state_delta``.
    """
    supplied = sorted(set(agent_kwargs) & set(_SUPPLIED_BY_MEMORY))
    if supplied:
        raise TypeError(
            f"MemoryAgent loads the history from memory: drop {', '.join(supplied)} "
            "and pass conversation_id= to continue a conversation"
        )
    if user_prompt is None or not isinstance(user_prompt, str | Sequence):
        raise TypeError("a user prompt (str or a sequence of user contents) is required")
    if not isinstance(new_conversation, bool):
        raise TypeError(f"new_conversation must be a bool, got {type(new_conversation).__name__}")
    if conversation_id is not None:
        if new_conversation:
            raise EntryValidationError(
                "conversation_id", "give conversation_id= or new_conversation=True, not both"
            )
        conversation_id = check_conversation_id(conversation_id)
        if conversation_id == PYDANTIC_AI_NEW:
            raise EntryValidationError(
                "conversation_id",
                f"{PYDANTIC_AI_NEW!r} means a new conversation to pydantic-ai; "
                "pass new_conversation=True to start one",
            )
    owner = memory.user_id
    if isinstance(deps, MemoryDeps) and owner is not None and deps.memory.user_id != owner:
        raise EntryValidationError(
            "deps", f"a run for user {owner!r} takes MemoryDeps of that user's memory"
        )
    return Prepared(
        memory=memory,
        conversation_id=conversation_id,
        new_conversation=new_conversation,
        user_id=owner,
        prompt=user_prompt,
        text=prompt_text(user_prompt),
        deps=deps,
        agent_kwargs=dict(agent_kwargs),
        state_delta=checked_state(state_delta, "state_delta"),
    )


def current_conversation(prepared: Prepared) -> Operation[str]:
    """The conversation a run continues: the one given, else the user's current one.

    The user's current conversation is their newest (``user_conversations``,
    an indexed read, newest first).  A new id when ``new_conversation`` was
    asked, when the run is for no user, or when the user has none yet (the
    run's turn creates it).
    """
    if prepared.conversation_id is not None:
        return prepared.conversation_id
    if not prepared.new_conversation and prepared.user_id is not None:
        newest = yield from prepared.memory._user_conversations(prepared.user_id, limit=1)
        if newest:
            return newest[0]
    return uuid.uuid4().hex


def release_capabilities(hold: SessionHold, *, between_requests: bool) -> list[Any]:
    """The capabilities a run adds for ``hold`` (none when the run owns no transaction).

    A :class:`~firefly_orm.pydantic_ai._capability.ReleaseSession`; none with a
    pydantic-ai that has no capabilities (there, only the transaction of the
    run's read is ended before the model call).
    """
    if not hold.owned:
        return []
    try:
        from firefly_orm.pydantic_ai._capability import ReleaseSession
    except ImportError:  # pragma: no cover - pydantic-ai before capabilities
        return []
    return [ReleaseSession(hold, between_requests=between_requests)]


def with_capabilities(agent_kwargs: Mapping[str, Any], added: list[Any]) -> dict[str, Any]:
    """``agent_kwargs`` with ``added`` after the caller's own ``capabilities``."""
    kwargs = dict(agent_kwargs)
    if added:
        kwargs["capabilities"] = [*(kwargs.get("capabilities") or ()), *added]
    return kwargs


def with_graph_tools(
    graph: KnowledgeGraph | None, memory: MemoryManager, agent_kwargs: Mapping[str, Any]
) -> Mapping[str, Any]:
    """``agent_kwargs`` with ``graph``'s ``facts_about`` / ``related`` tools for the run's user
    (:func:`~firefly_orm.knowledge.knowledge_toolset`) after the caller's own ``toolsets``.

    Raises:
        EntryValidationError: A graph and a run for no user (the tools are per user).
    """
    if graph is None:
        return agent_kwargs
    if memory.user_id is None:
        raise EntryValidationError("user_id", "an agent with a graph runs for one user")
    toolset = knowledge_toolset(graph, user_id=memory.user_id)
    return {**agent_kwargs, "toolsets": [*(agent_kwargs.get("toolsets") or ()), toolset]}
