"""What a :class:`~firefly_orm.pydantic_ai.MemoryAgent` run gives and stores.

The deps its tools get (:class:`MemoryDeps`), the result it returns
(:class:`MemoryRunResult`: pydantic-ai's result and the turn stored for it),
and how a run becomes a turn's text and metadata (:func:`prompt_text`,
:func:`response_text`, :func:`usage_metadata`).  Imported by
:mod:`firefly_orm.pydantic_ai`, which checks the ``pydantic-ai`` extra first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pydantic_core
from pydantic_ai.messages import UserContent
from pydantic_ai.run import AgentRunResult
from pydantic_ai.usage import RunUsage

from firefly_orm.conversation._model import ConversationTurn
from firefly_orm.errors import EntryValidationError
from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai._state import StagedState

__all__ = ["MemoryDeps", "MemoryRunResult", "prompt_text", "response_text", "usage_metadata"]

OutputT = TypeVar("OutputT")

#: The usage counters every stored turn records (others only when not zero).
_USAGE_ALWAYS = ("requests", "tool_calls", "input_tokens", "output_tokens")


@dataclass(frozen=True)
class MemoryDeps:
    """What a tool needs to use the run's memory, as the agent's ``RunContext.deps``.

    Give the agent ``deps_type=MemoryDeps`` and
    :class:`~firefly_orm.pydantic_ai.MemoryAgent` builds one
    per run; a tool then reads or writes the memory of the same conversation and
    user::

        @agent.tool
        async def remember_order(ctx: RunContext[MemoryDeps], order_id: str) -> str:
            await ctx.deps.memory.async_set_fact("order_id", order_id)
            return "noted"

    A tool that changes the conversation's state stages the change with
    :meth:`stage_state`: it is written with the run's turn, in the turn's unit
    of work, and not at all if the run stores no turn::

        @agent.tool
        async def choose_plan(ctx: RunContext[MemoryDeps], plan: str) -> str:
            ctx.deps.stage_state({"plan": plan, "user:tier": "gold"})
            return "chosen"

    Attributes:
        memory: The manager of this run (for a ``user_id`` run, the user's view:
            their facts and long-term items).  Use its ``async_`` methods.
        conversation_id: The conversation the run belongs to (it may not be
            stored yet: a new conversation is written with the run's turn).
        user_id: The user the run is for, or ``None``.

    Raises:
        EntryValidationError: ``user_id`` given and ``memory`` is not bound to
            that user (an unbound manager would give the tools every user's
            memory): pass ``memory.for_user(user_id)``.
    """

    memory: MemoryManager
    conversation_id: str
    user_id: str | None = None
    _staged: StagedState = field(default_factory=StagedState, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.user_id is not None and self.memory.user_id != self.user_id:
            raise EntryValidationError(
                "user_id",
                f"the deps' memory serves {self.memory.user_id!r}, not {self.user_id!r}: "
                "give the user's memory (memory.for_user(user_id))",
            )

    def stage_state(self, delta: Mapping[str, Any]) -> None:
        """Stage a change of the conversation's state, stored with the run's turn (no I/O).

        The keys are :meth:`ConversationMemory.update_state
        <firefly_orm.conversation.ConversationMemory.update_state>`'s: ``app:``
        keys are the app's, ``user:`` keys the conversation owner's, other
        keys the conversation's own, and ``temp:`` keys live in this run only
        (:attr:`staged_state` shows them to the run's later tools; they are
        never stored).  When the run stores its turn, everything staged (over
        the run's ``state_delta=``; a later value of a key wins) is written
        in the turn's unit of work (``add_turn(..., state_delta=)``): the
        state and the turn commit together.  A run that raises, is cancelled,
        or whose stream or iteration is left early writes none of it.  Keys
        can be set, not removed (``memory.async_update_state(cid, {},
        remove=[...])`` removes at once).

        Each run stages into the deps it gives the agent: the
        ``MemoryDeps`` it builds (also the one handed to ``deps_factory``),
        or a ``MemoryDeps`` passed as ``deps=``, whose staged state the run
        resets when it starts (pass it to one run at a time).

        Raises:
            EntryValidationError: Not a mapping, a bad key, or a value that
                is not JSON (nothing staged); or a ``MemoryDeps`` no run was
                given (the app's own, inside deps it passed: nothing would
                store what it stages).
        """
        self._staged.stage(delta)

    @property
    def staged_state(self) -> dict[str, Any]:
        """What this run has staged so far (a copy; ``temp:`` keys included)."""
        return self._staged.view()


#: Where a :class:`MemoryRunResult` keeps its turn (beside pydantic-ai's own state).
_TURN_ATTRIBUTE = "_firefly_orm_turn"


class MemoryRunResult(AgentRunResult[OutputT]):
    """pydantic-ai's ``AgentRunResult`` of a ``MemoryAgent`` run, and the turn it stored.

    Returned by :meth:`MemoryAgent.run <firefly_orm.pydantic_ai.MemoryAgent.run>` and
    :meth:`MemoryAgent.run_sync <firefly_orm.pydantic_ai.MemoryAgent.run_sync>`.  It
    IS an ``AgentRunResult`` (``isinstance`` holds; ``output``, ``usage``,
    ``new_messages()``, ``conversation_id``... are pydantic-ai's, unchanged),
    so code written for pydantic-ai's result keeps working; it adds what the
    run stored, so an app returns the turn's id without reading it back::

        result = await support.run("Any news?", conversation_id=cid, user_id="ada")
        return {"reply": result.output, "turn_id": result.turn_id}

    One turn holds the whole exchange: the user's prompt
    (``turn.user_prompt``), the answer (``turn.assistant_response``) and the
    run's new model messages (``turn.raw_messages``), stored together in one
    unit of work.  Serialised by pydantic (``TypeAdapter(AgentRunResult)``),
    a result has pydantic-ai's shape: the turn is not part of it.
    """

    @property
    def turn(self) -> ConversationTurn:
        """The turn this run stored: its id, prompt, answer, messages, usage metadata.

        As :meth:`ConversationMemory.get_turns
        <firefly_orm.conversation.ConversationMemory.get_turns>` would read it
        back right after the run (``turn.metadata["usage"]``,
        ``turn.metadata["run_id"]``, ``turn.metadata["agent"]`` for a named
        agent).
        """
        turn: ConversationTurn | None = self.__dict__.get(_TURN_ATTRIBUTE)
        if turn is None:
            raise AttributeError(
                "this MemoryRunResult was not returned by a MemoryAgent run, so it has no turn"
            )
        return turn

    @property
    def turn_id(self) -> int:
        """The id of the turn this run stored (``turn.turn_id``).

        Unique and increasing within the conversation: the id
        :meth:`ConversationMemory.update_turn
        <firefly_orm.conversation.ConversationMemory.update_turn>` and
        ``delete_turn`` take.
        """
        return self.turn.turn_id

    @classmethod
    def of(
        cls, result: AgentRunResult[OutputT], turn: ConversationTurn
    ) -> MemoryRunResult[OutputT]:
        """``result`` (pydantic-ai's, left unchanged) with ``turn``, the turn stored for it."""
        made: MemoryRunResult[OutputT] = cls.__new__(cls)
        made.__dict__.update(result.__dict__)
        made.__dict__[_TURN_ATTRIBUTE] = turn
        return made


def prompt_text(user_prompt: str | Sequence[UserContent]) -> str:
    """The text stored as a turn's ``user_prompt`` for a pydantic-ai user prompt.

    A string is kept as it is; in a sequence of contents, text items are kept
    and every other item (an image, a document...) becomes ``[<type name>]``,
    one item per line.
    """
    if isinstance(user_prompt, str):
        return user_prompt
    return "\n".join(
        item if isinstance(item, str) else f"[{type(item).__name__}]" for item in user_prompt
    )


def response_text(output: Any) -> str:
    """The text stored as a turn's ``assistant_response`` for a run's output.

    A string is kept; structured output (a pydantic model, a dataclass, a dict...)
    is stored as its JSON; anything JSON cannot hold as ``str(output)``.
    """
    if isinstance(output, str):
        return output
    try:
        return pydantic_core.to_json(output).decode()
    except (TypeError, ValueError, pydantic_core.PydanticSerializationError):
        return str(output)


def usage_metadata(usage: RunUsage) -> dict[str, Any]:
    """A run's token usage as stored in the turn's metadata (JSON-ready).

    Always ``requests``, ``tool_calls``, ``input_tokens``, ``output_tokens`` and
    ``total_tokens``; pydantic-ai's other counters (cache, audio, reasoning...)
    only when they are not zero, and ``details`` when it has entries.
    """
    stored: dict[str, Any] = {name: getattr(usage, name) for name in _USAGE_ALWAYS}
    stored["total_tokens"] = usage.total_tokens
    for name, value in dataclasses.asdict(usage).items():
        if name not in stored and value and isinstance(value, int | dict):
            stored[name] = value
    return stored
