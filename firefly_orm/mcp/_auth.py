"""Bearer tokens of the MCP server's HTTP transport, each mapped to the user it serves."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from firefly_orm.entry import validate_user_id
from firefly_orm.errors import EntryValidationError

__all__ = ["StaticTokenVerifier", "authenticated_user", "load_tokens"]

logger = logging.getLogger("firefly_orm")


def load_tokens(path: str | Path) -> dict[str, str]:
    """The token -> user id mapping of a JSON file: ``{"<token>": "<user id>", ...}``.

    Raises:
        EntryValidationError: The file cannot be read, is not such an object,
            holds an empty token or an invalid user id.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EntryValidationError("tokens", f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise EntryValidationError("tokens", f"{path}: expected a non-empty JSON object")
    return _checked(data)


def _checked(tokens: Mapping[Any, Any]) -> dict[str, str]:
    checked: dict[str, str] = {}
    for token, user_id in tokens.items():
        if not isinstance(token, str) or not token.strip():
            raise EntryValidationError("tokens", "every token must be a non-empty string")
        if not isinstance(user_id, str):
            raise EntryValidationError("tokens", "every user id must be a string")
        checked[token] = validate_user_id(user_id)
    return checked


class StaticTokenVerifier:
    """An MCP ``TokenVerifier`` over a fixed token -> user id mapping.

    A known bearer token is accepted as that user's (the access token's
    ``client_id`` and ``subject`` are the user id); any other is refused, and
    the SDK answers the request with 401.

    Args:
        tokens: Token -> user id (e.g. :func:`load_tokens`).

    Raises:
        EntryValidationError: An empty token or an invalid user id.
    """

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._tokens = _checked(tokens)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access token of a known ``token``, else ``None``."""
        for known, user_id in self._tokens.items():
            if secrets.compare_digest(known.encode(), token.encode()):
                return AccessToken(token=token, client_id=user_id, subject=user_id, scopes=[])
        logger.info("mcp: refused an unknown bearer token")
        return None


def authenticated_user() -> str | None:
    """The user id of the current request's access token (``None``: no authentication)."""
    token = get_access_token()
    return None if token is None else token.subject
