"""Exception hierarchy of firefly_orm.

Every error the library raises on purpose derives from :class:`FireflyOrmError`.
Driver errors (sqlite3, psycopg, pymongo) are wrapped into :class:`StoreError`
subclasses, and any URL that appears in a message has its secrets hidden (the
userinfo password and secret query parameters such as ``?password=``).

This module is also the one home of secret scrubbing: :func:`redact_url`
renders a URL without its secrets, :func:`url_secrets` (and :func:`url_password`)
extract them, and :func:`scrub_secret` hides secrets (plain or URL-quoted) inside
any text, such as a driver's error message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus

__all__ = [
    "ConcurrencyError",
    "ConversationNotFoundError",
    "DatabaseConnectionError",
    "DelegationError",
    "EntryValidationError",
    "FireflyOrmError",
    "MigrationRequiredError",
    "MissingEngineError",
    "MissingExtraError",
    "NotFoundError",
    "StoreError",
    "StoreCorruptedError",
    "redact_url",
    "scrub_secret",
    "url_password",
    "url_secrets",
]


class FireflyOrmError(Exception):
    """Base class of every firefly_orm error."""


class EntryValidationError(FireflyOrmError, ValueError):
    """An entry (or an argument) failed validation; nothing was written.

    ``field`` names the offending field, e.g. ``"importance"``.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class NotFoundError(FireflyOrmError, LookupError):
    """What an operation names does not exist (e.g. a conversation turn); nothing was written."""


class ConversationNotFoundError(NotFoundError):
    """No such conversation *for this caller*; nothing was read or written.

    A memory bound to a user (``MemoryManager(user_id=...)``,
    ``ConversationMemory(user_id=...)``) raises it for a conversation that does
    not exist and for one that belongs to someone else alike: the message and
    the type are the same, so conversation ids cannot be probed.
    ``conversation_id`` names the conversation asked for.
    """

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(f"conversation {conversation_id!r} not found")


class DelegationError(FireflyOrmError, LookupError):
    """No sub-agent can take a delegated task (an empty pool, nothing matches...)."""


class StoreError(FireflyOrmError):
    """A storage backend failed (the driver error is chained as ``__cause__``)."""


class DatabaseConnectionError(StoreError):
    """The database could not be reached or the connection failed."""


class StoreCorruptedError(StoreError):
    """Stored data could not be read back (e.g. a corrupt JSON file)."""


class ConcurrencyError(StoreError):
    """A concurrent writer changed the data this operation was based on."""


class MigrationRequiredError(StoreError):
    """The database schema is not at the revision this library needs."""


class MissingEngineError(FireflyOrmError, RuntimeError):
    """A store was given no engine for this kind of call, and builds no second pool.

    A :class:`~firefly_orm.sql.SQLAlchemyStore` given only ``async_engine=``
    has no sync engine: its sync methods raise this instead of opening a second
    connection pool from your engine's URL.  The message names the argument to
    pass (``engine=`` or ``async_engine=``); nothing was done.
    """


class MissingExtraError(FireflyOrmError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, what: str, extra: str, module: str | None = None) -> None:
        super().__init__(
            f"{what} requires the {extra!r} extra: pip install 'firefly-orm[{extra}]'",
            name=module,
        )


#: Query parameters whose value is a secret: any key containing ``password`` (libpq's
#: ``password`` and ``sslpassword``, pymongo's ``tlsCertificateKeyFilePassword``; any
#: case), plus these lower-cased aliases.  Hiding errs on the side of too much.
_SECRET_QUERY_KEYS = frozenset({"passwd", "pwd"})

#: One ``key=value`` parameter of a URL query (``&`` or ``;`` separated).
_QUERY_PARAM = re.compile(r"(?P<lead>[?&;])(?P<key>[^=&;#?]*)=(?P<value>[^&;#]*)")


def _is_secret_key(key: str) -> bool:
    """Whether the query parameter ``key`` (raw or URL-quoted) carries a secret."""
    name = unquote_plus(key).strip().lower()
    return "password" in name or name in _SECRET_QUERY_KEYS


def _query_of(text: str) -> str:
    """The query part of a URL's text (from its first ``?``, fragment excluded)."""
    _, sep, query = text.partition("?")
    return sep + query.split("#", 1)[0] if sep else ""


def _hide_query_secrets(text: str) -> str:
    """``text`` with the value of every secret query parameter replaced by ``***``."""

    def hide(match: re.Match[str]) -> str:
        if not _is_secret_key(match["key"]):
            return match[0]
        return f"{match['lead']}{match['key']}=***"

    head, sep, tail = text.partition("?")
    return head + _QUERY_PARAM.sub(hide, sep + tail) if sep else text


def _parsed(url: Any) -> Any:
    """``url`` as a SQLAlchemy ``URL``, or ``None`` when it is to be read as text.

    Text is read as text when SQLAlchemy cannot parse it, or when its query
    uses ``;`` separators (MongoDB allows them; SQLAlchemy would read several
    parameters as one and render their secrets URL-quoted).
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if isinstance(url, str) and ";" in _query_of(url):
        return None
    try:
        return make_url(url)
    except (ArgumentError, ValueError, TypeError):
        return None


def _split_userinfo(text: str) -> tuple[str, str, str | None, str] | None:
    """``(scheme, user, password or None, rest)`` of a URL SQLAlchemy cannot parse.

    The userinfo ends at the last ``@`` before the query (secret query values,
    which may hold an ``@``, are hidden first by the callers that render).
    """
    if "://" not in text:
        return None
    scheme, rest = text.split("://", 1)
    before_query = rest.split("?", 1)[0]
    at = before_query.rfind("@")
    if at < 0:
        return None
    creds, host = rest[:at], rest[at + 1 :]
    user, colon, password = creds.partition(":")
    return scheme, user, password if colon else None, host


def redact_url(url: Any) -> str:
    """Render a database URL (str or SQLAlchemy ``URL``) with every secret hidden.

    The password of the userinfo (``user:***@host``) and the value of every
    secret query parameter (``?password=***``, ``sslpassword``,
    ``tlsCertificateKeyFilePassword``, ...; any case) are replaced by ``***``.
    URLs SQLAlchemy cannot parse (e.g. MongoDB URLs with several hosts) are
    redacted as text.
    """
    parsed = _parsed(url)
    if parsed is not None:
        return _hide_query_secrets(parsed.render_as_string(hide_password=True))
    text = _hide_query_secrets(str(url))
    parts = _split_userinfo(text)
    if parts is None:
        return text
    scheme, user, password, host = parts
    return f"{scheme}://{user}{':***' if password is not None else ''}@{host}"


def url_secrets(url: Any) -> tuple[str, ...]:
    """Every secret of a database URL (str or SQLAlchemy ``URL``), plain (unquoted).

    The userinfo password and the values of the secret query parameters (see
    :func:`redact_url`); empty when the URL holds none.  Pass the result to
    :func:`scrub_secret` to hide them all from a driver's message.
    """
    if url is None:
        return ()
    found: list[str] = []
    parsed = _parsed(url)
    if parsed is not None:
        if parsed.password:
            found.append(str(parsed.password))
        for key, value in parsed.query.items():
            if _is_secret_key(key):
                found.extend([value] if isinstance(value, str) else value)
    else:
        text = str(url)
        parts = _split_userinfo(_hide_query_secrets(text))
        if parts is not None and parts[2]:
            found.extend((unquote(parts[2]), parts[2]))
        for match in _QUERY_PARAM.finditer(_query_of(text)):
            if _is_secret_key(match["key"]):
                found.extend((unquote_plus(match["value"]), match["value"]))
    return tuple(dict.fromkeys(secret for secret in found if secret))


def url_password(url: Any) -> str | None:
    """The password of a database URL (str or SQLAlchemy ``URL``), or ``None``.

    The userinfo password, else the value of a secret query parameter such as
    ``?password=``.  URLs SQLAlchemy cannot parse (e.g. ``mongodb+srv://`` with
    several hosts) are read as text.  A URL may hold several secrets: scrub
    with :func:`url_secrets` to hide them all.
    """
    secrets = url_secrets(url)
    return secrets[0] if secrets else None


def scrub_secret(text: str, secret: str | Iterable[str] | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``***``.

    ``secret`` is one secret or several (e.g. :func:`url_secrets`).  The
    URL-quoted forms of each secret (as it appears inside a URL) are replaced
    too.  An empty or ``None`` secret leaves ``text`` unchanged.
    """
    if not secret:
        return text
    secrets = [secret] if isinstance(secret, str) else list(secret)
    forms = {
        form
        for one in secrets
        if one
        for form in (one, quote(one, safe=""), quote_plus(one, safe=""))
    }
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, "***")
    return text
