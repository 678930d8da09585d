"""Exception hierarchy of firefly_orm.

Every error the library raises on purpose derives from :class:`FireflyOrmError`.
Driver errors (sqlite3, psycopg, pymongo) are wrapped into :class:`StoreError`
subclasses, and any URL that appears in a message has its password hidden.

This module is also the one home of secret scrubbing: :func:`redact_url`
renders a URL without its password, :func:`url_password` extracts the password
of a URL, and :func:`scrub_secret` hides a secret (plain or URL-quoted) inside
any text, such as a driver's error message.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, quote_plus

__all__ = [
    "ConcurrencyError",
    "DatabaseConnectionError",
    "EntryValidationError",
    "FireflyOrmError",
    "MigrationRequiredError",
    "MissingExtraError",
    "StoreError",
    "StoreCorruptedError",
    "redact_url",
    "scrub_secret",
    "url_password",
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


class MissingExtraError(FireflyOrmError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, what: str, extra: str, module: str | None = None) -> None:
        super().__init__(
            f"{what} requires the {extra!r} extra: pip install 'firefly-orm[{extra}]'",
            name=module,
        )


def redact_url(url: Any) -> str:
    """Render a database URL (str or SQLAlchemy ``URL``) with its password hidden."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError, TypeError):
        text = str(url)
        # Not a URL SQLAlchemy can parse: hide anything between "://user:" and "@".
        if "://" in text and "@" in text:
            scheme, rest = text.split("://", 1)
            creds, host = rest.rsplit("@", 1)
            user = creds.split(":", 1)[0]
            return f"{scheme}://{user}:***@{host}"
        return text


def url_password(url: Any) -> str | None:
    """The password of a database URL (str or SQLAlchemy ``URL``), or ``None``.

    URLs SQLAlchemy cannot parse (e.g. ``mongodb+srv://`` with several hosts)
    fall back to the text between ``"://user:"`` and the last ``"@"``.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if url is None:
        return None
    try:
        password = make_url(url).password
    except (ArgumentError, ValueError, TypeError):
        text = str(url)
        if "://" not in text or "@" not in text:
            return None
        creds = text.split("://", 1)[1].rsplit("@", 1)[0]
        password = creds.split(":", 1)[1] if ":" in creds else None
    return str(password) if password else None


def scrub_secret(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``***``.

    The URL-quoted forms of the secret (as it appears inside a URL) are
    replaced too. An empty or ``None`` secret leaves ``text`` unchanged.
    """
    if not secret:
        return text
    forms = {secret, quote(secret, safe=""), quote_plus(secret, safe="")}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, "***")
    return text
