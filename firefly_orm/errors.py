"""Exception hierarchy of firefly_orm.

Every error the library raises on purpose derives from :class:`FireflyOrmError`.
Driver errors (sqlite3, psycopg, pymongo) are wrapped into :class:`StoreError`
subclasses, and any URL that appears in a message has its password hidden.
"""

from __future__ import annotations

from typing import Any

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
