"""FireflyMemoryService: ADK's ``BaseMemoryService`` on a firefly_orm ``LongTermMemory``."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from google.adk.events.event import Event
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry as AdkMemoryEntry
from google.adk.sessions.session import Session
from google.genai import types

from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term import EPISODIC, LongTermMemory, MemoryItem
from firefly_orm.long_term._model import MAX_TAG_LENGTH

__all__ = ["FireflyMemoryService"]

logger = logging.getLogger("firefly_orm")

#: The metadata field of an item that holds what ADK needs back.
_ADK = "adk"


def app_tag(app_name: str) -> str:
    """The tag of an app's items (a digest of the name when it is too long for a tag)."""
    tag = f"adk-app:{app_name}"
    if len(tag) <= MAX_TAG_LENGTH:
        return tag
    return "adk-app#" + hashlib.sha256(app_name.encode()).hexdigest()


def _text(content: types.Content | None) -> str:
    """The text parts of ``content``, one per line ("" when it has none)."""
    if content is None or not content.parts:
        return ""
    return "\n".join(p.text for p in content.parts if p.text)


def _item(app_name: str, user_id: str, session_id: str | None, event: Event) -> dict[str, Any]:
    """The long-term item of one event (keyed by app, session and event: re-adding replaces)."""
    assert event.content is not None  # callers keep events with text only
    return {
        "text": _text(event.content),
        "key": f"adk:{app_name}:{session_id or ''}:{event.id}",
        "user_id": user_id,
        "tags": [app_tag(app_name)],
        "kind": EPISODIC,
        "created_at": datetime.fromtimestamp(event.timestamp, UTC).isoformat(),
        "metadata": {
            _ADK: {
                "app_name": app_name,
                "session_id": session_id,
                "event_id": event.id,
                "author": event.author,
                "timestamp": event.timestamp,
                "content": event.content.model_dump(mode="json", exclude_none=True),
            }
        },
    }


def _entry(item: MemoryItem) -> AdkMemoryEntry:
    """The ADK memory entry of a recalled item."""
    stored = item.metadata.get(_ADK)
    if not isinstance(stored, Mapping):  # an item this service did not write
        content = types.Content(role="user", parts=[types.Part(text=item.text)])
        return AdkMemoryEntry(id=item.id, content=content, timestamp=item.created_at.isoformat())
    timestamp = datetime.fromtimestamp(float(stored["timestamp"]), UTC).isoformat()
    return AdkMemoryEntry(
        id=item.id,
        content=types.Content.model_validate(stored["content"]),
        author=stored.get("author"),
        timestamp=timestamp,
        custom_metadata={"session_id": stored.get("session_id"), "event_id": stored["event_id"]},
    )


class FireflyMemoryService(BaseMemoryService):
    """ADK memory (``add_session_to_memory`` / ``search_memory``) kept in a ``LongTermMemory``.

    Each event with text becomes one episodic item of ``memory``, owned by the
    session's user and tagged with the app, keyed by app, session and event id:
    adding a session again (ADK does, as it grows) replaces its items instead
    of duplicating them, all of a call in one unit of work.  ``search_memory``
    is the memory's ``recall``: full-text search, by meaning too (hybrid) when
    the memory has an ``embedder`` (:mod:`firefly_orm.vector`); only the user's
    items of that app are searched.  The memory's limits apply
    (``long_term_limit``, ``episodic_retention_days``), and
    :meth:`~firefly_orm.conversation.ConversationMemory.erase_user` or the
    store's ``erase_user`` forgets a user's items.

    Args:
        memory: Where the items live.  Bind it to no user: the service writes
            and searches for the user ADK names.
        limit: At most this many memories per search (ADK's in-memory service
            returns ten).

    Raises:
        TypeError: ``memory`` is not a ``LongTermMemory``.
        EntryValidationError: ``limit`` is not a positive integer.
    """

    def __init__(self, memory: LongTermMemory, *, limit: int = 10) -> None:
        if not isinstance(memory, LongTermMemory):
            raise TypeError(f"memory must be a LongTermMemory, got {type(memory).__name__}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise EntryValidationError("limit", f"must be a positive integer, got {limit!r}")
        self._memory = memory
        self._limit = limit

    @property
    def memory(self) -> LongTermMemory:
        """The long-term memory the items live in."""
        return self._memory

    def __repr__(self) -> str:
        return f"FireflyMemoryService(memory={self._memory!r}, limit={self._limit})"

    async def add_session_to_memory(self, session: Session) -> None:
        """Remember every event of ``session`` that has text (one unit of work)."""
        await self._add(session.app_name, session.user_id, session.id, session.events)

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Remember ``events`` that have text (one unit of work); ``custom_metadata`` is unused."""
        await self._add(app_name, user_id, session_id, events)

    async def _add(
        self, app_name: str, user_id: str, session_id: str | None, events: Sequence[Event]
    ) -> None:
        items = [_item(app_name, user_id, session_id, e) for e in events if _text(e.content)]
        if not items:
            return
        await self._memory.async_import_items(items)
        logger.debug("adk: %d event(s) of app %r in long-term memory", len(items), app_name)

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        """The user's memories of the app that match ``query`` best, best first."""
        recalled = await self._memory.async_recall(
            query, limit=self._limit, user_id=user_id, tags=[app_tag(app_name)]
        )
        return SearchMemoryResponse(memories=[_entry(r.item) for r in recalled])

    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None
    ) -> None:
        """Forget the memory with this id (as ``search_memory`` returned it); the user's only."""
        if memory_id:
            await self._memory.async_forget(memory_id, user_id=user_id)
