"""A LlamaIndex chat store (``BaseChatStore``) on a ``ConversationMemory``.

:class:`FireflyChatStore` implements llama-index-core's
``llama_index.core.storage.chat_store.BaseChatStore`` (``set_messages``,
``get_messages``, ``add_message``, ``delete_messages``, ``delete_message``,
``delete_last_message``, ``get_keys`` and their async twins), so
``ChatMemoryBuffer`` (and whatever else takes a chat store) keeps its history
in any firefly_orm store.  One chat store key is one conversation (the key is
the conversation id); each ``add_message`` is one turn, in one unit of work,
whose raw message is the ``ChatMessage`` as ``model_dump(mode="json")`` gives
it, read back equal.  Install the ``llama-index`` extra.

::

    from llama_index.core.memory import ChatMemoryBuffer
    from firefly_orm import ConversationMemory, SQLiteStore
    from firefly_orm.integrations.llama_index import FireflyChatStore

    memory = ConversationMemory(store=SQLiteStore("memory.sqlite3"), max_tokens=None)
    buffer = ChatMemoryBuffer.from_defaults(
        chat_store=FireflyChatStore(memory), chat_store_key="support-42"
    )

``set_messages`` replaces the conversation's turns with one turn holding the
messages, in one unit of work
(:meth:`~firefly_orm.conversation.ConversationMemory.import_conversation`).
``delete_message`` and ``delete_last_message`` read the turn holding the
message and then shorten (or delete) it: two units of work, so run one
writer per key at a time, as LlamaIndex's memories do.

The memory's token budget (or ``max_messages``) evicts the oldest turns, and so
the oldest messages, on ``add_message`` (``max_tokens=None`` keeps everything;
``ChatMemoryBuffer`` trims what it hands the model by its own ``token_limit``).
A memory bound to a user (``ConversationMemory(user_id=...)``) makes the store
that user's: another user's conversation reads as empty and is left alone by
the deletes, writes to it raise
:class:`~firefly_orm.errors.ConversationNotFoundError`, and ``get_keys`` lists
the user's conversations only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.base import BaseChatStore

from firefly_orm.bridges._steps import Operation, arun, run
from firefly_orm.conversation import ConversationMemory, ConversationTurn
from firefly_orm.errors import ConversationNotFoundError
from firefly_orm.integrations._items import check_session, flatten, split_texts

__all__ = ["FireflyChatStore"]

logger = logging.getLogger("firefly_orm")

#: Roles whose text counts as the user's side of a turn (tool and function results: neither).
_USER_ROLES = frozenset({"user", "system", "developer"})
_ASSISTANT_ROLES = frozenset({"assistant", "chatbot", "model"})


class FireflyChatStore(BaseChatStore):
    """A LlamaIndex chat store whose keys are conversations of ``memory``.

    Args:
        memory: Where the messages live; its store, budgets and user binding apply.

    Raises:
        TypeError: ``memory`` is not a ``ConversationMemory``.
    """

    _memory: ConversationMemory = PrivateAttr()

    def __init__(self, memory: ConversationMemory) -> None:
        if not isinstance(memory, ConversationMemory):
            raise TypeError(f"memory must be a ConversationMemory, got {type(memory).__name__}")
        super().__init__()
        self._memory = memory

    @classmethod
    def class_name(cls) -> str:
        """The class name LlamaIndex serialises the store under."""
        return "FireflyChatStore"

    @property
    def memory(self) -> ConversationMemory:
        """The conversation memory the messages live in."""
        return self._memory

    def __repr__(self) -> str:
        return f"FireflyChatStore(memory={self._memory!r})"

    # ------------------------------------------------------------------ sync
    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Replace the messages of ``key`` (one unit of work; ``[]`` leaves none).

        Raises:
            ConversationNotFoundError: ``key`` is another user's conversation.
            TypeError: A message is not a ``ChatMessage`` or not JSON (nothing written).
        """
        run(self._memory.store, _set(self._memory, key, messages))

    def get_messages(self, key: str) -> list[ChatMessage]:
        """Every retained message of ``key``, oldest first (``[]``: none, or another user's)."""
        return run(self._memory.store, _get(self._memory, key))

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """Append ``message`` to ``key`` as one turn (one unit of work).

        ``idx`` (as ``SimpleChatStore``'s): insert it before the message at
        ``idx`` instead, into the turn holding that message (past the end:
        appended).

        Raises:
            ConversationNotFoundError: ``key`` is another user's conversation.
            TypeError: ``message`` is not a ``ChatMessage`` or not JSON, or
                ``idx`` not an int (nothing written).
        """
        run(self._memory.store, _add(self._memory, key, message, idx))

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Forget every message of ``key``; what was there (``None``: no such conversation)."""
        return run(self._memory.store, _delete_all(self._memory, key))

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Remove and return the message at ``idx`` (``None``: no such message)."""
        return run(self._memory.store, _delete_at(self._memory, key, idx))

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Remove and return the newest message of ``key`` (``None``: there is none)."""
        return run(self._memory.store, _delete_at(self._memory, key, -1))

    def get_keys(self) -> list[str]:
        """The keys (conversation ids) of the memory's store, oldest first."""
        return self._memory.conversation_ids

    # ------------------------------------------------------------------ async
    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Async twin of :meth:`set_messages`."""
        await arun(self._memory.store, _set(self._memory, key, messages))

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        """Async twin of :meth:`get_messages`."""
        return await arun(self._memory.store, _get(self._memory, key))

    async def async_add_message(
        self, key: str, message: ChatMessage, idx: int | None = None
    ) -> None:
        """Async twin of :meth:`add_message`."""
        await arun(self._memory.store, _add(self._memory, key, message, idx))

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        """Async twin of :meth:`delete_messages`."""
        return await arun(self._memory.store, _delete_all(self._memory, key))

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Async twin of :meth:`delete_message`."""
        return await arun(self._memory.store, _delete_at(self._memory, key, idx))

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        """Async twin of :meth:`delete_last_message`."""
        return await arun(self._memory.store, _delete_at(self._memory, key, -1))

    async def aget_keys(self) -> list[str]:
        """Async twin of :meth:`get_keys`."""
        return await self._memory.async_conversation_ids()


# --------------------------------------------------------------------------- operations
# Each is written once and run sync (run) or async (arun) by the methods above.


def _set(memory: ConversationMemory, key: str, messages: Sequence[ChatMessage]) -> Operation[None]:
    key = check_session(key, memory)
    dicts = _dicts(messages)
    turns: list[dict[str, Any]] = []
    if dicts:
        prompt, answer = split_texts(dicts, _role_text)
        turns.append({"user_prompt": prompt, "assistant_response": answer, "raw_messages": dicts})
    yield from memory._import_conversation({"turns": turns}, conversation_id=key)


def _get(memory: ConversationMemory, key: str) -> Operation[list[ChatMessage]]:
    key = check_session(key, memory)
    turns = yield from _turns(memory, key)
    return [] if turns is None else _messages(turns)


def _add(
    memory: ConversationMemory, key: str, message: ChatMessage, idx: int | None
) -> Operation[None]:
    key = check_session(key, memory)
    dicts = _dicts([message])
    if idx is not None:
        held = yield from _held(memory, key, idx)
        if held is not None:
            turn, position, items = held
            items.insert(position, dicts[0])
            yield from _rewrite(memory, key, turn, items)
            return
    prompt, answer = split_texts(dicts, _role_text)
    yield from memory._add_turn(key, prompt, answer, dicts)


def _delete_all(memory: ConversationMemory, key: str) -> Operation[list[ChatMessage] | None]:
    key = check_session(key, memory)
    turns = yield from _turns(memory, key)
    if turns is None:
        return None
    yield from memory._clear(key)
    return _messages(turns)


def _delete_at(memory: ConversationMemory, key: str, idx: int) -> Operation[ChatMessage | None]:
    """Remove the message at ``idx`` (``-1``: the newest) and return it."""
    key = check_session(key, memory)
    held = yield from _held(memory, key, idx)
    if held is None:
        return None
    turn, position, items = held
    removed = items.pop(position)
    yield from _rewrite(memory, key, turn, items)
    logger.debug("chat store key %r: deleted message %d (turn %d)", key, idx, turn.turn_id)
    return ChatMessage.model_validate(removed)


def _held(
    memory: ConversationMemory, key: str, idx: int
) -> Operation[tuple[ConversationTurn, int, list[Any]] | None]:
    """``(turn, position in it, the turn's messages)`` of message ``idx`` (``None``: no such)."""
    if isinstance(idx, bool) or not isinstance(idx, int):
        raise TypeError(f"idx must be an int, got {type(idx).__name__}")
    turns = yield from _turns(memory, key)
    held = [(turn, i) for turn in turns or () for i in range(len(flatten([turn], _text_dicts)))]
    if idx < 0:
        idx += len(held)
    if not 0 <= idx < len(held):
        return None
    turn, position = held[idx]
    return turn, position, flatten([turn], _text_dicts)


def _rewrite(
    memory: ConversationMemory, key: str, turn: ConversationTurn, items: list[Any]
) -> Operation[None]:
    """Store ``items`` as the messages of ``turn`` (none: delete the turn)."""
    if not items:
        yield from memory._delete_turn(key, turn.turn_id)
        return
    prompt, answer = split_texts(items, _role_text)
    yield from memory._update_turn(
        key, turn.turn_id, user_prompt=prompt, assistant_response=answer, raw_messages=items
    )


def _turns(memory: ConversationMemory, key: str) -> Operation[list[ConversationTurn] | None]:
    """The turns of ``key``; ``None`` when it is no conversation of the memory's user."""
    exists = yield from memory._exists(key)
    if not exists:
        return None
    try:
        return (yield from memory._get_turns(key))
    except ConversationNotFoundError:  # another user's: nothing of this user's
        return None


# --------------------------------------------------------------------------- messages


def _dicts(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as JSON dicts; a wrong type or an unserialisable field raises ``TypeError``."""
    if isinstance(messages, ChatMessage) or not all(isinstance(m, ChatMessage) for m in messages):
        raise TypeError("messages must be llama_index ChatMessage objects")
    try:
        return [m.model_dump(mode="json") for m in messages]
    except ValueError as exc:  # pydantic's serialisation errors
        raise TypeError(f"a message cannot be stored as JSON: {exc}") from None


def _messages(turns: Sequence[ConversationTurn]) -> list[ChatMessage]:
    return [ChatMessage.model_validate(d) for d in flatten(turns, _text_dicts)]


def _text_dicts(prompt: str, answer: str) -> list[Any]:
    """The message dicts of a turn stored as text only (by ``add_turn``)."""
    return [
        ChatMessage(role="user", content=prompt).model_dump(mode="json"),
        ChatMessage(role="assistant", content=answer).model_dump(mode="json"),
    ]


def _role_text(stored: Any) -> tuple[str, str] | None:
    """``("user" | "assistant", text)`` of a stored message dict; ``None`` for tool results."""
    role = stored.get("role") if isinstance(stored, dict) else None
    if role not in _USER_ROLES and role not in _ASSISTANT_ROLES:
        return None
    blocks = stored.get("blocks") or []
    texts = [b.get("text") for b in blocks if isinstance(b, dict) and b.get("block_type") == "text"]
    text = "\n".join(t for t in texts if isinstance(t, str))
    return ("user" if role in _USER_ROLES else "assistant"), text
