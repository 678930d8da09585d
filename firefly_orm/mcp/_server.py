"""The MCP server: one user's memory as tools and resources, on the official ``mcp`` SDK."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp_types import Resource

from firefly_orm.conversation import ConversationTurn
from firefly_orm.entry import validate_user_id
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError, FireflyOrmError
from firefly_orm.knowledge import KnowledgeGraph, KnownFact, RelatedEntity, fact_view, related_view
from firefly_orm.long_term import MemoryItem
from firefly_orm.manager import MemoryManager
from firefly_orm.mcp._auth import authenticated_user

__all__ = ["CONVERSATION_URI", "build_server"]

logger = logging.getLogger("firefly_orm")

#: The URI template of a conversation resource.
CONVERSATION_URI = "conversation://{conversation_id}"

T = TypeVar("T")

_INSTRUCTIONS = (
    "Memory of one user: long-term items (remember / recall / forget), conversations "
    "(list_conversations, conversation_history, add_turn; resources conversation://<id>) "
    "and working facts (set_fact / get_fact / list_facts / delete_fact); with a knowledge "
    "graph, facts_about / related."
)


class _Users:
    """The manager bound to the user a call is served for (one per user, made once)."""

    def __init__(self, manager: MemoryManager, user_id: str | None) -> None:
        self._root = manager
        self._user_id = user_id
        self._views: dict[str, MemoryManager] = {}
        self._lock = threading.Lock()

    def current(self) -> MemoryManager:
        user_id = self._user_id if self._user_id is not None else authenticated_user()
        if user_id is None:  # the HTTP transport refuses such a request before it gets here
            raise ToolError("not authenticated")
        if self._root.user_id == user_id:
            return self._root
        with self._lock:
            view = self._views.get(user_id)
            if view is None:
                view = self._views[user_id] = self._root.for_user(user_id)
            return view


def _answer(call: Callable[[], T]) -> T:
    """Run one memory call, its expected failures as tool errors (nothing was written)."""
    try:
        return call()
    except ConversationNotFoundError as exc:
        raise ToolError(str(exc)) from None
    except FireflyOrmError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from None


def _item(item: MemoryItem, score: float | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "id": item.id,
        "text": item.text,
        "importance": item.importance,
        "tags": list(item.tags),
        "kind": item.kind,
        "key": item.key,
        "created_at": item.created_at.isoformat(),
    }
    if score is not None:
        found["score"] = score
    return found


def _turn(turn: ConversationTurn) -> dict[str, Any]:
    return {
        "turn_id": turn.turn_id,
        "user": turn.user_prompt,
        "assistant": turn.assistant_response,
        "timestamp": turn.timestamp.isoformat(),
    }


def _listed(manager: MemoryManager, conversation_id: str) -> dict[str, Any]:
    """A conversation's id and the listing fields it has (none for one gone meanwhile)."""
    listed: dict[str, Any] = {"conversation_id": conversation_id}
    try:
        info = manager.conversation_info(conversation_id)
    except ConversationNotFoundError:
        return listed
    if info.title is not None:
        listed["title"] = info.title
    if info.tags:
        listed["tags"] = list(info.tags)
    if info.updated_at is not None:
        listed["updated_at"] = info.updated_at.isoformat()
    if info.archived:
        listed["archived"] = True
    return listed


class _MemoryServer(MCPServer[Any]):
    """An ``MCPServer`` whose resource list is the current user's conversations."""

    def __init__(self, users: _Users, **options: Any) -> None:
        super().__init__(**options)
        self._users = users

    async def list_resources(self) -> list[Resource]:
        """The static resources, then a ``conversation://<id>`` per conversation of the user."""
        listed = await super().list_resources()
        manager = self._users.current()
        user_id = manager.user_id
        assert user_id is not None  # every manager of _Users is bound
        ids = await manager.async_user_conversations(user_id)
        return listed + [
            Resource(
                uri=CONVERSATION_URI.format(conversation_id=cid),
                name=f"conversation {cid}",
                mime_type="application/json",
            )
            for cid in ids
        ]


def build_server(
    manager: MemoryManager,
    *,
    user_id: str | None = None,
    token_verifier: TokenVerifier | None = None,
    server_url: str | None = None,
    graph: KnowledgeGraph | None = None,
) -> MCPServer[Any]:
    """An MCP server over ``manager``'s store, serving one user per call.

    Every tool and resource goes through ``manager`` bound to that user
    (:meth:`MemoryManager.for_user`), so another user's conversation reads as
    not found and another user's items and facts are never seen.

    Args:
        manager: The manager whose store, limits and long-term namespace are
            served (unbound, or bound to ``user_id``).
        user_id: The one user of this server (stdio, or HTTP without
            authentication).
        token_verifier: Authenticates HTTP clients instead (e.g.
            :class:`~firefly_orm.mcp.StaticTokenVerifier`): each call is served
            for the user its access token names (``subject``); a request
            without a valid token is refused with 401.
        server_url: The server's public base URL (``http://host:port``),
            announced as the protected resource with ``token_verifier``.
        graph: Also serve the user's knowledge graph: tools ``facts_about``
            (now or ``as_of`` a time) and ``related`` (entities within a few
            hops), read-only, for the user of the call.

    Raises:
        EntryValidationError: Neither or both of ``user_id`` and
            ``token_verifier``, a bad ``user_id``, or ``manager`` bound to
            another user.
    """
    if (user_id is None) == (token_verifier is None):
        raise EntryValidationError("user_id", "give either a user_id or a token_verifier")
    if user_id is not None:
        user_id = validate_user_id(user_id)
        if manager.user_id not in (None, user_id):
            raise EntryValidationError("user_id", "the manager is bound to another user")
    elif manager.user_id is not None:
        raise EntryValidationError("manager", "a server with authentication needs an unbound one")
    auth: AuthSettings | None = None
    if token_verifier is not None:
        base = (server_url or "http://127.0.0.1:8000").rstrip("/")
        auth = AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            validate_token_resource=False,
        )
    users = _Users(manager, user_id)
    server = _MemoryServer(
        users,
        name="firefly-orm",
        instructions=_INSTRUCTIONS,
        token_verifier=token_verifier,
        auth=auth,
        log_level="WARNING",
    )
    _add_tools(server, users)
    if graph is not None:
        _add_graph_tools(server, users, graph)
    return server


def _add_graph_tools(server: MCPServer[Any], users: _Users, graph: KnowledgeGraph) -> None:
    """Register the knowledge-graph tools (reads of the current user's graph) on ``server``."""

    def owner() -> str:
        user_id = users.current().user_id
        assert user_id is not None  # every manager of _Users is bound
        return user_id

    @server.tool()
    def facts_about(entity: str, as_of: str | None = None) -> list[KnownFact]:
        """What is known about an entity ("user" is the user): the facts true now, or as of
        an ISO 8601 time with a timezone (facts that changed keep their past)."""
        user_id = owner()
        when = _instant(as_of)
        found = _answer(lambda: graph.facts_about(user_id, entity, as_of=when))
        return [fact_view(f) for f in found]

    @server.tool()
    def related(entity: str, depth: int = 1) -> list[RelatedEntity]:
        """Entities connected to an entity by current facts within ``depth`` hops (1 to 10),
        nearest first; an unknown entity has none."""
        user_id = owner()
        try:
            found = _answer(lambda: graph.neighbors(user_id, entity, depth))
        except KeyError:
            return []
        return [related_view(e, d) for e, d in found]


def _instant(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(f"as_of: not an ISO 8601 time: {text!r}") from None
    if when.tzinfo is None:
        raise ToolError("as_of: give a time with a timezone (e.g. +00:00)")
    return when


def _add_tools(server: MCPServer[Any], users: _Users) -> None:
    """Register the memory tools and the conversation resource template on ``server``."""

    @server.tool()
    def remember(
        content: str,
        importance: float = 0.5,
        tags: list[str] | None = None,
        key: str | None = None,
    ) -> dict[str, str]:
        """Remember a fact in the user's long-term memory; a key replaces the item with that key."""
        mgr = users.current()
        item_id = _answer(
            lambda: mgr.remember(content, importance=importance, tags=tags or (), key=key)
        )
        return {"id": item_id}

    @server.tool()
    def recall(query: str, limit: int = 5, tags: list[str] | None = None) -> list[dict[str, Any]]:
        """The user's long-term items that match a text query best (most relevant first)."""
        mgr = users.current()
        found = _answer(lambda: mgr.recall(query, limit=limit, tags=tags))
        return [_item(hit.item, hit.score) for hit in found]

    @server.tool()
    def forget(id_or_key: str) -> dict[str, bool]:
        """Delete one of the user's long-term items by key or id; whether one was deleted."""
        mgr = users.current()
        return {"forgotten": _answer(lambda: mgr.forget(id_or_key))}

    @server.tool()
    def list_conversations(
        limit: int = 50, offset: int = 0, details: bool = False
    ) -> list[str] | list[dict[str, Any]]:
        """Ids of the user's conversations, newest first.  With ``details``, one object
        each: ``conversation_id`` plus its ``title``, ``tags`` and ``updated_at`` (ISO
        8601) when it has them, and ``archived`` when it is archived."""
        mgr = users.current()
        user_id = mgr.user_id
        assert user_id is not None
        ids = _answer(lambda: mgr.user_conversations(user_id, limit=limit, offset=offset))
        if not details:
            return ids
        return [_listed(mgr, cid) for cid in ids]

    @server.tool()
    def conversation_history(conversation_id: str) -> list[dict[str, Any]]:
        """The retained turns of one of the user's conversations, oldest first."""
        return _history(users.current(), conversation_id)

    @server.tool()
    def add_turn(conversation_id: str, user_prompt: str, assistant_response: str) -> dict[str, Any]:
        """Add a turn to a conversation of the user (started when it does not exist yet)."""
        mgr = users.current()
        turn = _answer(lambda: mgr.add_turn(conversation_id, user_prompt, assistant_response))
        return _turn(turn)

    @server.tool()
    def set_fact(key: str, value: Any) -> dict[str, str]:
        """Set a working fact of the user (any JSON value), replacing its previous value."""
        mgr = users.current()
        _answer(lambda: mgr.set_fact(key, value))
        return {"key": key}

    @server.tool()
    def get_fact(key: str) -> dict[str, Any]:
        """A working fact of the user: ``{"key", "value", "found"}``."""
        mgr = users.current()
        entry = _answer(lambda: mgr.working.get_entry(key))
        value = None if entry is None else mgr.working.get(key)
        return {"key": key, "value": value, "found": entry is not None}

    @server.tool()
    def list_facts() -> dict[str, Any]:
        """Every working fact of the user, as an object."""
        mgr = users.current()
        return _answer(mgr.working.to_dict)

    @server.tool()
    def delete_fact(key: str) -> dict[str, str]:
        """Remove a working fact of the user (no error when it is not set)."""
        mgr = users.current()
        _answer(lambda: mgr.working.delete(key))
        return {"key": key}

    @server.resource(CONVERSATION_URI, mime_type="application/json")
    def conversation(conversation_id: str) -> str:
        """One of the user's conversations: its retained turns as JSON."""
        try:
            turns = _history(users.current(), conversation_id)
        except ToolError as exc:
            raise ResourceNotFoundError(str(exc)) from None
        return json.dumps({"conversation_id": conversation_id, "turns": turns})


def _history(manager: MemoryManager, conversation_id: str) -> list[dict[str, Any]]:
    turns: Iterable[ConversationTurn] = _answer(
        lambda: manager.conversation.get_turns(conversation_id)
    )
    if not turns and not _answer(lambda: manager.conversation_exists(conversation_id)):
        raise ToolError(f"conversation {conversation_id!r} not found")
    return [_turn(turn) for turn in turns]
