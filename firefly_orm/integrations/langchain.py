"""A LangChain ``BaseChatMessageHistory`` on a ``ConversationMemory``.

:class:`FireflyChatMessageHistory` implements langchain-core's chat message
history (``messages`` / ``aget_messages``, ``add_messages`` /
``aadd_messages``, ``clear`` / ``aclear``), so ``RunnableWithMessageHistory``
and anything else that takes a chat history keeps it in any firefly_orm store.
One session id is one conversation (the id is the conversation id); each
``add_messages`` call is one turn, in one unit of work, whose raw messages are
the messages as ``message_to_dict`` gives them, read back equal.  Install the
``langchain`` extra.

::

    from firefly_orm import ConversationMemory, SQLiteStore
    from firefly_orm.integrations.langchain import FireflyChatMessageHistory

    memory = ConversationMemory(store=SQLiteStore("memory.sqlite3"), max_tokens=None)
    history = FireflyChatMessageHistory("support-42", memory)
    history.add_user_message("Hello")

The memory's token budget (or ``max_messages``) evicts the oldest turns, and so
the oldest messages (``max_tokens=None`` keeps everything).  A memory bound to
a user (``ConversationMemory(user_id=...)``) makes the history that user's: a
session id that is another user's conversation reads as empty, ``clear``
leaves it alone and ``add_messages`` raises
:class:`~firefly_orm.errors.ConversationNotFoundError`, nothing read or written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    message_to_dict,
    messages_from_dict,
)

from firefly_orm.conversation import ConversationMemory, ConversationTurn
from firefly_orm.errors import ConversationNotFoundError
from firefly_orm.integrations._items import check_session, flatten, split_texts

__all__ = ["FireflyChatMessageHistory"]

#: Message types whose text counts as the user's side of a turn.
_USER_TYPES = frozenset({"human", "system"})


class FireflyChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history kept in one conversation of ``memory``.

    Args:
        session_id: The session, and the conversation id (a non-empty string
            without NUL characters).
        memory: Where the messages live; its store, budgets and user binding apply.

    Raises:
        EntryValidationError: A bad ``session_id``.
        TypeError: ``memory`` is not a ``ConversationMemory``.
    """

    def __init__(self, session_id: str, memory: ConversationMemory) -> None:
        super().__init__()
        self.session_id = check_session(session_id, memory)
        self._memory = memory

    @property
    def memory(self) -> ConversationMemory:
        """The conversation memory the messages live in."""
        return self._memory

    def __repr__(self) -> str:
        return f"FireflyChatMessageHistory(session_id={self.session_id!r}, memory={self._memory!r})"

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """Every retained message of the session, oldest first."""
        try:
            turns = self._memory.get_turns(self.session_id)
        except ConversationNotFoundError:  # another user's: nothing of this user's
            return []
        return _messages(turns)

    async def aget_messages(self) -> list[BaseMessage]:
        """Async twin of :attr:`messages`."""
        try:
            turns = await self._memory.async_get_turns(self.session_id)
        except ConversationNotFoundError:
            return []
        return _messages(turns)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` as one turn (one unit of work); none: nothing is written.

        Raises:
            ConversationNotFoundError: The session id is another user's conversation.
            TypeError: A message cannot be stored as JSON (nothing is written).
        """
        turn = _turn(messages)
        if turn is not None:
            self._memory.add_turn(self.session_id, *turn)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async twin of :meth:`add_messages`."""
        turn = _turn(messages)
        if turn is not None:
            await self._memory.async_add_turn(self.session_id, *turn)

    def clear(self) -> None:
        """Forget every message of the session (the whole conversation)."""
        try:
            self._memory.clear(self.session_id)
        except ConversationNotFoundError:  # nothing of this user's to clear
            return

    async def aclear(self) -> None:
        """Async twin of :meth:`clear`."""
        try:
            await self._memory.async_clear(self.session_id)
        except ConversationNotFoundError:
            return


def _messages(turns: Sequence[ConversationTurn]) -> list[BaseMessage]:
    """The messages stored in ``turns``, oldest first."""
    return messages_from_dict(flatten(turns, _text_messages))


def _turn(messages: Sequence[BaseMessage]) -> tuple[str, str, list[dict[str, Any]]] | None:
    """``(user_prompt, assistant_response, raw_messages)`` of a turn holding ``messages``."""
    if isinstance(messages, BaseMessage) or not all(isinstance(m, BaseMessage) for m in messages):
        raise TypeError("messages must be a sequence of langchain_core BaseMessage objects")
    dicts = [message_to_dict(m) for m in messages]
    if not dicts:
        return None
    prompt, answer = split_texts(dicts, _role_text)
    return prompt, answer, dicts


def _text_messages(prompt: str, answer: str) -> list[Any]:
    """The message dicts of a turn stored as text only (by ``add_turn``)."""
    return [message_to_dict(HumanMessage(prompt)), message_to_dict(AIMessage(answer))]


def _role_text(stored: Any) -> tuple[str, str] | None:
    """``("user" | "assistant", text)`` of a human, system or AI message dict; else ``None``."""
    kind = stored.get("type")
    if kind not in _USER_TYPES and kind != "ai":
        return None
    content = stored.get("data", {}).get("content")
    if isinstance(content, list):
        parts = [p if isinstance(p, str) else p.get("text") for p in content]
        content = "\n".join(p for p in parts if isinstance(p, str))
    if not isinstance(content, str):
        return None
    return ("user" if kind in _USER_TYPES else "assistant"), content
