"""definable's ``Memory``, built on firefly_orm's :class:`~firefly_orm.MemoryManager`.

definable configures an agent's memory with one object:
``Memory(store, model, enabled, max_messages, pin_count, recent_count,
description)``.  Here it stands on a :class:`~firefly_orm.MemoryManager` (and
its :class:`~firefly_orm.conversation.ConversationMemory`): every session is a
conversation, every message one turn of it, so the conversation's limits
(``max_messages``, ``pin_count``, ``recent_count``) count messages, and a
``model`` summarises what they evict.

::

    from firefly_orm import SQLiteStore
    from firefly_orm.compat.definable import Memory

    memory = Memory(store=SQLiteStore("memory.sqlite3"), max_messages=50,
                    description="Remembers the user's orders.")
    memory.add({"role": "user", "content": "Order 1042 is late"}, "s1", user_id="ada")
    [e.role for e in memory.get_entries("s1", user_id="ada")]   # ['user']
    memory.enabled = False        # off: nothing read, nothing written, config kept

* ``enabled=False`` switches memory off without losing its configuration:
  :meth:`Memory.add`, :meth:`Memory.add_many` write nothing and return ``[]``
  (or ``None``), :meth:`Memory.get_entries` reads nothing and returns ``[]``;
  set :attr:`Memory.enabled` back to ``True`` to resume.
* ``description`` says what the memory is for; :attr:`Memory.instructions`
  gives the line to add to an agent's instructions (``None`` when off or
  undescribed).
* :meth:`Memory.agent` gives a pydantic-ai agent this memory
  (:class:`DefinableAgent`): while memory is on, each run is a
  :class:`~firefly_orm.pydantic_ai.MemoryAgent` run (the user's current
  conversation continued, the turn stored) with the description among the
  run's instructions; while it is off, the agent runs alone (nothing read,
  nothing written).
* Entries (:class:`MessageEntry`) carry ``role``, ``content``, ``user_id``,
  ``session_id``, ``created_at`` and ``updated_at`` (the time of the last
  edit, :meth:`Memory.update`; ``created_at`` when never edited).
  ``get_entries(session_id, user_id=...)`` filters by user: another user's
  session gives ``[]``.
* :meth:`Memory.add_many` is all or nothing: every message is checked, then
  all are written in one unit of work (a failure writes none).

Each method has an ``async_`` twin (the same operation, run on the async
driver).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, cast

from firefly_orm.bridges._steps import MemoryLayer, Operation, async_method, sync_method
from firefly_orm.conversation import ConversationTurn, Summarizer
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError, NotFoundError
from firefly_orm.manager import MemoryManager
from firefly_orm.store import InMemoryStore, MemoryStore

__all__ = ["ROLES", "DefinableAgent", "Memory", "MessageEntry"]

logger = logging.getLogger("firefly_orm.compat.definable")

#: The roles a message may have.
ROLES: Final = frozenset({"user", "assistant", "system", "tool"})
#: The turn metadata key holding a message's role.
_ROLE_KEY: Final = "role"


@dataclass(frozen=True)
class MessageEntry:
    """One stored message of a session, in definable's shape.

    Attributes:
        session_id: The session (a conversation id).
        turn_id: Its place in the session (increasing).
        role: ``"user"``, ``"assistant"``, ``"system"`` or ``"tool"``.
        content: The message's text.
        user_id: The user the session belongs to, or ``None``.
        created_at: When it was stored (timezone-aware).
        updated_at: When it last changed: the time of its last edit
            (:meth:`Memory.update`, or ``ConversationMemory.update_turn``),
            else ``created_at``.
        metadata: What else the turn carries (without the role).
    """

    session_id: str
    turn_id: int
    role: str
    content: str
    user_id: str | None
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any] = field(default_factory=dict)


def _message(message: Any) -> tuple[str, str]:
    """``(role, content)`` of a ``{"role", "content"}`` mapping or an object with both."""
    if isinstance(message, Mapping):
        role, content = message.get("role"), message.get("content")
    else:
        role, content = getattr(message, "role", None), getattr(message, "content", None)
    if role not in ROLES:
        raise EntryValidationError("role", f"must be one of {', '.join(sorted(ROLES))}")
    if not isinstance(content, str):
        raise EntryValidationError("content", "a message's content must be a str")
    return str(role), content


def _turn(role: str, content: str) -> ConversationTurn:
    """The turn that stores one message (its role in the metadata)."""
    prompt, response = (content, "") if role == "user" else ("", content)
    return ConversationTurn(
        user_prompt=prompt,
        assistant_response=response,
        raw_messages=[{"role": role, "content": content}],
        metadata={_ROLE_KEY: role},
    )


def _entries(session_id: str, turn: ConversationTurn, owner: str | None) -> list[MessageEntry]:
    """The messages of a stored turn.

    A turn :meth:`Memory.add` wrote holds one message (its role in the
    metadata); a turn of a whole exchange (a ``MemoryAgent`` run, ``add_turn``)
    gives its prompt and its answer, each when not empty.
    """
    metadata = dict(turn.metadata)
    role = metadata.pop(_ROLE_KEY, None)
    if role is not None:
        content = turn.user_prompt if role == "user" else turn.assistant_response
        messages = [(str(role), content)]
    else:
        messages = [
            (who, text)
            for who, text in (("user", turn.user_prompt), ("assistant", turn.assistant_response))
            if text
        ]
    return [
        MessageEntry(
            session_id=session_id,
            turn_id=turn.turn_id,
            role=who,
            content=text,
            user_id=owner,
            created_at=turn.timestamp,
            updated_at=turn.updated_at or turn.timestamp,
            metadata=dict(metadata),
        )
        for who, text in messages
    ]


class Memory(MemoryLayer):
    """definable's ``Memory``: a session memory that can be switched off.

    Args:
        store: Where the sessions live (default: a new
            :class:`~firefly_orm.InMemoryStore`).
        model: Summarises evicted messages: a pydantic-ai model or model name
            (an LLM summarizer is made with
            :func:`~firefly_orm.summarization.create_llm_summarizer`), or a
            summarizer callable; ``None``: evicted messages are dropped.
        enabled: ``False`` switches memory off (see :attr:`enabled`).
        max_messages: At most this many messages kept per session (``None``:
            no message cap; the token budget still applies).
        pin_count: The oldest messages kept whatever else is evicted.
        recent_count: The newest messages never evicted.
        description: What the memory is for, told to the agent
            (:attr:`instructions`).
        max_tokens: The token budget of a session (default 128,000).

    Raises:
        TypeError: ``enabled`` not a bool, ``description`` not a str.
        EntryValidationError: A bad limit.
    """

    def __init__(
        self,
        store: MemoryStore | None = None,
        model: Any = None,
        enabled: bool = True,
        max_messages: int | None = None,
        pin_count: int = 0,
        recent_count: int = 0,
        description: str | None = None,
        *,
        max_tokens: int = 128_000,
    ) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
        if description is not None and not isinstance(description, str):
            raise TypeError(f"description must be a str, got {type(description).__name__}")
        super().__init__(store if store is not None else InMemoryStore())
        self._model = model
        self._enabled = enabled
        self._description = description
        self._manager = MemoryManager(
            store=self._store,
            max_conversation_tokens=max_tokens,
            summarizer=self._summarizer(model),
            max_messages=max_messages,
            pin_count=pin_count,
            recent_count=recent_count,
        )

    @staticmethod
    def _summarizer(model: Any) -> Summarizer | None:
        if model is None:
            return None
        from firefly_orm.summarization import create_llm_summarizer

        if isinstance(model, str):
            return create_llm_summarizer(model=model)
        try:
            from pydantic_ai.models import Model
        except ImportError:  # pragma: no cover - without the pydantic-ai extra
            Model = None  # type: ignore[assignment,misc]
        if Model is not None and isinstance(model, Model):
            return create_llm_summarizer(model=model)
        if callable(model):
            return model  # type: ignore[no-any-return]
        raise TypeError("model must be a pydantic-ai model, a model name or a summarizer")

    def __repr__(self) -> str:
        return (
            f"Memory(store={type(self._store).__name__}, enabled={self._enabled}, "
            f"description={self._description!r})"
        )

    # ------------------------------------------------------------------ configuration
    @property
    def enabled(self) -> bool:
        """Whether memory is on; set it to switch memory off and on (the configuration stays)."""
        return self._enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"enabled must be a bool, got {type(value).__name__}")
        self._enabled = value
        logger.debug("memory %s", "enabled" if value else "disabled")

    @property
    def description(self) -> str | None:
        """What the memory is for."""
        return self._description

    @property
    def instructions(self) -> str | None:
        """The line to add to an agent's instructions: the description, when on."""
        if not self._enabled or not self._description:
            return None
        return f"Your memory: {self._description}"

    @property
    def model(self) -> Any:
        """The model (or summarizer) given."""
        return self._model

    @property
    def manager(self) -> MemoryManager:
        """The :class:`~firefly_orm.MemoryManager` underneath (for a ``MemoryAgent``)."""
        return self._manager

    def agent(self, agent: Any, **options: Any) -> DefinableAgent:
        """A pydantic-ai ``agent`` with this memory (see :class:`DefinableAgent`).

        ``options``: the :class:`~firefly_orm.pydantic_ai.MemoryAgent` options
        (``name``, ``recall_limit``, ``deps_factory``...).  Needs the
        ``pydantic-ai`` extra.
        """
        from firefly_orm.pydantic_ai import MemoryAgent

        return DefinableAgent(self, MemoryAgent(agent, memory=self._manager, **options))

    # ------------------------------------------------------------------ operations
    def _add(
        self, message: Any, session_id: str, user_id: str | None = None
    ) -> Operation[MessageEntry | None]:
        """Store one message at the end of ``session_id`` (``None`` when memory is off).

        A new session becomes ``user_id``'s; an existing one must be theirs.

        Raises:
            EntryValidationError: A bad role, content or id (nothing written).
            ConversationNotFoundError: The session is another user's.
        """
        added = yield from self._add_many([message], session_id, user_id)
        return added[0] if added else None

    def _add_many(
        self, messages: Sequence[Any], session_id: str, user_id: str | None = None
    ) -> Operation[list[MessageEntry]]:
        """Store ``messages`` in order, one turn each, all or nothing (``[]`` when off).

        Every message is checked before anything is written, then all are
        written in ONE unit of work
        (:meth:`~firefly_orm.conversation.ConversationMemory.add_turns`): an
        error (a lost connection, a failing summarizer) writes none of them.
        """
        if not self._enabled:
            return []
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
            raise TypeError("messages must be a sequence of messages")
        turns = [_turn(*_message(message)) for message in messages]
        stored = yield from self._manager.conversation._add_turns(
            session_id, turns, user_id=user_id
        )
        if not stored:
            return []
        owner = yield from self._manager._owner_of(session_id)
        return [entry for turn in stored for entry in _entries(session_id, turn, owner)]

    def _update(
        self, session_id: str, turn_id: int, content: str, user_id: str | None = None
    ) -> Operation[MessageEntry | None]:
        """Replace the content of one stored message; its ``updated_at`` becomes now.

        ``user_id``: the session must be that user's.  ``None`` when memory is off.

        Raises:
            EntryValidationError: A bad id or content (nothing written).
            ConversationNotFoundError: The session is missing or another user's.
            NotFoundError: The session has no such message.
        """
        if not self._enabled:
            return None
        if not isinstance(content, str):
            raise EntryValidationError("content", "a message's content must be a str")
        owner = yield from self._manager._owner_of(session_id)
        if user_id is not None and owner != user_id:
            raise ConversationNotFoundError(session_id)
        conversation = self._manager.conversation
        turns = yield from conversation._get_turns(session_id)
        old = next((t for t in turns if t.turn_id == turn_id), None)
        role = None if old is None else old.metadata.get(_ROLE_KEY)
        if old is None or role not in ROLES:
            raise NotFoundError(f"session {session_id!r} has no message {turn_id!r}")
        edited = _turn(str(role), content)
        turn = yield from conversation._update_turn(
            session_id,
            turn_id,
            user_prompt=edited.user_prompt,
            assistant_response=edited.assistant_response,
            raw_messages=edited.raw_messages,
        )
        return _entries(session_id, turn, owner)[0]

    def _get_entries(
        self, session_id: str, user_id: str | None = None
    ) -> Operation[list[MessageEntry]]:
        """The messages of ``session_id`` kept, oldest first (``[]`` when memory is off or none).

        ``user_id``: only that user's session (another user's, or nobody's,
        gives ``[]``).
        """
        if not self._enabled:
            return []
        try:
            owner = yield from self._manager._owner_of(session_id)
        except ConversationNotFoundError:
            return []
        if user_id is not None and owner != user_id:
            return []
        turns = yield from self._manager.conversation._get_turns(session_id)
        return [entry for turn in turns for entry in _entries(session_id, turn, owner)]

    # ------------------------------------------------------------------ public forms
    add = sync_method(_add)
    add_many = sync_method(_add_many)
    update = sync_method(_update)
    get_entries = sync_method(_get_entries)

    async_add = async_method(_add)
    async_add_many = async_method(_add_many)
    async_update = async_method(_update)
    async_get_entries = async_method(_get_entries)


def _instructions(memory: Memory, agent_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``agent_kwargs`` with the memory's instructions line after the caller's own."""
    line = memory.instructions
    if line is None:
        return agent_kwargs
    given = agent_kwargs.get("instructions")
    if given is None:
        given = []
    elif isinstance(given, str) or not isinstance(given, Sequence):
        given = [given]
    return {**agent_kwargs, "instructions": [*given, line]}


class DefinableAgent:
    """A pydantic-ai agent with a :class:`Memory` that can be switched off.

    Made by :meth:`Memory.agent`.  ``run``, ``run_sync``, ``run_stream`` and
    ``iter`` take the prompt, ``user_id=``, ``conversation_id=``,
    ``new_conversation=`` and the agent's own keyword arguments.  While
    :attr:`Memory.enabled` (read at each run), a run is the
    :class:`~firefly_orm.pydantic_ai.MemoryAgent` run: a run with only
    ``user_id`` continues that user's current conversation, the turn is
    stored, and :attr:`Memory.instructions` is added to the run's
    instructions.  While memory is off, the pydantic-ai agent runs alone: no
    history is read and nothing is written (the memory arguments are ignored).
    """

    def __init__(self, memory: Memory, memory_agent: Any) -> None:
        self._memory = memory
        self._memory_agent = memory_agent

    @property
    def memory(self) -> Memory:
        """The memory the runs use (switch it with ``memory.enabled``)."""
        return self._memory

    @property
    def agent(self) -> Any:
        """The pydantic-ai agent."""
        return self._memory_agent.agent

    def _call(
        self,
        method: str,
        user_prompt: Any,
        *,
        user_id: str | None,
        conversation_id: str | None,
        new_conversation: bool,
        agent_kwargs: dict[str, Any],
    ) -> Any:
        """``method`` of the memory agent while memory is on, of the agent alone while off."""
        if not self._memory.enabled:
            return getattr(self.agent, method)(user_prompt, **agent_kwargs)
        return getattr(self._memory_agent, method)(
            user_prompt,
            user_id=user_id,
            conversation_id=conversation_id,
            new_conversation=new_conversation,
            **_instructions(self._memory, agent_kwargs),
        )

    async def run(
        self,
        user_prompt: Any,
        *,
        user_id: str | None = None,
        conversation_id: str | None = None,
        new_conversation: bool = False,
        **agent_kwargs: Any,
    ) -> Any:
        """One run (``MemoryAgent.run`` while memory is on, the agent's own ``run`` while off)."""
        return await self._call(
            "run",
            user_prompt,
            user_id=user_id,
            conversation_id=conversation_id,
            new_conversation=new_conversation,
            agent_kwargs=agent_kwargs,
        )

    def run_sync(
        self,
        user_prompt: Any,
        *,
        user_id: str | None = None,
        conversation_id: str | None = None,
        new_conversation: bool = False,
        **agent_kwargs: Any,
    ) -> Any:
        """Sync form of :meth:`run`."""
        return self._call(
            "run_sync",
            user_prompt,
            user_id=user_id,
            conversation_id=conversation_id,
            new_conversation=new_conversation,
            agent_kwargs=agent_kwargs,
        )

    def run_stream(
        self,
        user_prompt: Any,
        *,
        user_id: str | None = None,
        conversation_id: str | None = None,
        new_conversation: bool = False,
        **agent_kwargs: Any,
    ) -> AbstractAsyncContextManager[Any]:
        """:meth:`run` streamed (``MemoryAgent.run_stream`` / the agent's ``run_stream``)."""
        return cast(
            AbstractAsyncContextManager[Any],
            self._call(
                "run_stream",
                user_prompt,
                user_id=user_id,
                conversation_id=conversation_id,
                new_conversation=new_conversation,
                agent_kwargs=agent_kwargs,
            ),
        )

    def iter(
        self,
        user_prompt: Any,
        *,
        user_id: str | None = None,
        conversation_id: str | None = None,
        new_conversation: bool = False,
        **agent_kwargs: Any,
    ) -> AbstractAsyncContextManager[Any]:
        """:meth:`run` node by node (``MemoryAgent.iter`` / the agent's ``iter``)."""
        return cast(
            AbstractAsyncContextManager[Any],
            self._call(
                "iter",
                user_prompt,
                user_id=user_id,
                conversation_id=conversation_id,
                new_conversation=new_conversation,
                agent_kwargs=agent_kwargs,
            ),
        )
