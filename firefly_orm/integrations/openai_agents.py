"""An OpenAI Agents SDK ``Session`` on a :class:`~firefly_orm.conversation.ConversationMemory`.

:class:`FireflySession` implements the SDK's ``agents.memory.Session``
protocol (``get_items``, ``add_items``, ``pop_item``, ``clear_session``, all
async as the SDK defines them), so ``Runner.run(agent, prompt, session=...)``
keeps its history in any firefly_orm store.  One session id is one
conversation (the id is the conversation id); each ``add_items`` call is one
turn, in one unit of work, whose raw messages are the SDK's input item dicts,
stored as JSON and returned equal.  Install the ``openai-agents`` extra.

::

    from agents import Agent, Runner
    from firefly_orm import ConversationMemory, SQLiteStore
    from firefly_orm.integrations.openai_agents import FireflySession

    memory = ConversationMemory(store=SQLiteStore("memory.sqlite3"), max_tokens=None)
    session = FireflySession("support-42", memory)
    result = await Runner.run(Agent(name="support"), "Hello", session=session)

What the memory gives applies: its token budget (or ``max_messages``) evicts
the oldest turns, and so the oldest items, when items are added (pass
``max_tokens=None`` to keep everything); a memory bound to a user
(``ConversationMemory(user_id=...)``) makes the session that user's: a session
id that is another user's conversation reads as empty and refuses writes with
:class:`~firefly_orm.errors.ConversationNotFoundError`, nothing read or written.

``pop_item`` shortens (or deletes) the newest turn in one unit of work
(:meth:`ConversationMemory.pop_turn <firefly_orm.ConversationMemory.pop_turn>`),
so concurrent ``pop_item`` calls on one session each return a different item,
and a pop racing ``add_items`` takes either the newest item before the append
or the appended turn's last one, never losing or doubling an item.
"""

from __future__ import annotations

import logging
from typing import Any

from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, resolve_session_limit

from firefly_orm.conversation import ConversationMemory, ConversationTurn
from firefly_orm.errors import ConversationNotFoundError
from firefly_orm.integrations._items import check_session, flatten, last_items, split_texts

__all__ = ["FireflySession"]

logger = logging.getLogger("firefly_orm")

#: Roles whose text counts as the user's side of a turn (the rest is the assistant's).
_USER_ROLES = frozenset({"user", "system", "developer"})


class FireflySession:
    """An OpenAI Agents SDK session kept in one conversation of ``memory``.

    Args:
        session_id: The session, and the conversation id (a non-empty string
            without NUL characters).
        memory: Where the items live; its store, budgets and user binding apply.
        session_settings: The SDK's settings; ``limit`` is the default of
            :meth:`get_items` (``None``: every item).

    Raises:
        EntryValidationError: A bad ``session_id``.
        TypeError: ``memory`` is not a ``ConversationMemory``.
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        memory: ConversationMemory,
        *,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = check_session(session_id, memory)
        self.session_settings = session_settings
        self._memory = memory

    @property
    def memory(self) -> ConversationMemory:
        """The conversation memory the items live in."""
        return self._memory

    def __repr__(self) -> str:
        return f"FireflySession(session_id={self.session_id!r}, memory={self._memory!r})"

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first: the newest ``limit`` of them.

        ``limit=None`` uses ``session_settings.limit`` (``None`` there too:
        every retained item); ``0`` gives ``[]``.

        Raises:
            EntryValidationError: ``limit`` is negative or not an integer.
        """
        limit = resolve_session_limit(limit, self.session_settings)
        try:
            if limit is None:
                turns = await self._memory.async_get_turns(self.session_id)
            else:
                turns = await self._memory.async_get_recent(self.session_id, limit)
        except ConversationNotFoundError:  # another user's: nothing of this user's
            return []
        return last_items(flatten(turns, _text_items), limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` as one turn (one unit of work); ``[]`` writes nothing.

        Raises:
            TypeError: An item is not JSON-serialisable (nothing is written).
            ConversationNotFoundError: The session id is another user's conversation.
        """
        items = list(items)
        if not items:
            return
        prompt, answer = split_texts(items, _role_text)
        await self._memory.async_add_turn(self.session_id, prompt, answer, items)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (``None`` when the session is empty)."""
        try:
            turn = await self._memory.async_pop_turn(self.session_id, keep=_all_but_last_item)
        except ConversationNotFoundError:
            return None
        if turn is None:
            return None
        item: TResponseInputItem = flatten([turn], _text_items)[-1]
        logger.debug("session %r: popped an item of turn %d", self.session_id, turn.turn_id)
        return item

    async def clear_session(self) -> None:
        """Forget every item of the session (the whole conversation)."""
        try:
            await self._memory.async_clear(self.session_id)
        except ConversationNotFoundError:  # nothing of this user's to clear
            return


def _all_but_last_item(turn: ConversationTurn) -> tuple[str, str, list[Any]] | None:
    """What the newest turn keeps when its last item is popped (``None``: it goes whole)."""
    items: list[Any] = flatten([turn], _text_items)[:-1]
    if not items:
        return None
    prompt, answer = split_texts(items, _role_text)
    return prompt, answer, items


def _text_items(prompt: str, answer: str) -> list[Any]:
    """The input items of a turn stored as text only (by ``add_turn``)."""
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]


def _role_text(item: Any) -> tuple[str, str] | None:
    """``("user" | "assistant", text)`` of a message item; ``None`` for other items."""
    if not isinstance(item, dict) or not isinstance(item.get("role"), str):
        return None
    content = item.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        text = "\n".join(p for p in parts if isinstance(p, str))
    else:
        return None
    return ("user" if item["role"] in _USER_ROLES else "assistant"), text
