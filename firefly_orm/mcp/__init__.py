"""An MCP server of one user's memory (``firefly-orm mcp``; the ``mcp`` extra).

:func:`build_server` makes a Model Context Protocol server (the official
``mcp`` SDK's ``MCPServer``) over a :class:`~firefly_orm.manager.MemoryManager`:
tools ``remember`` / ``recall`` / ``forget`` (long-term memory),
``list_conversations`` / ``conversation_history`` / ``add_turn``
(conversations), ``set_fact`` / ``get_fact`` / ``list_facts`` /
``delete_fact`` (working facts), ``facts_about`` / ``related`` (the
knowledge graph, when one is given), and a resource ``conversation://<id>``
per conversation of the user.  Every call is served by the manager bound to ONE
user (:meth:`~firefly_orm.manager.MemoryManager.for_user`): the server's
``user_id``, or over HTTP the user an authenticated client's bearer token maps
to (:class:`StaticTokenVerifier`, :func:`load_tokens`).  Another user's
conversation reads as not found; bad input is a tool error and writes nothing.
"""

from __future__ import annotations

from firefly_orm.errors import MissingExtraError

try:
    import mcp as _sdk  # noqa: F401  (the extra's presence, checked once here)
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the MCP server (firefly_orm.mcp)", "mcp", exc.name) from exc

# isort: split
from firefly_orm.mcp._auth import StaticTokenVerifier, load_tokens
from firefly_orm.mcp._server import CONVERSATION_URI, build_server

__all__ = ["CONVERSATION_URI", "StaticTokenVerifier", "build_server", "load_tokens"]
