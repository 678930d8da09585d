"""The store behind ``python -m examples.browser_memory``, from a database URL.

* ``sqlite:///path/to/file.sqlite3`` (or a plain file path): :class:`~firefly_orm.SQLiteStore`;
* ``postgresql://...`` (``postgresql+psycopg://...``): :class:`~firefly_orm.PostgreSQLStore`
  in schema ``--schema`` (default ``firefly_memory``);
* ``mongodb://...`` / ``mongodb+srv://...``: :class:`~firefly_orm.MongoDBStore` in
  database ``--schema`` (default ``firefly_memory``).
"""

from __future__ import annotations

import os
from pathlib import Path

from firefly_orm import migrate
from firefly_orm.errors import redact_url
from firefly_orm.store import MemoryStore

__all__ = ["DEFAULT_DB", "DEFAULT_SCHEMA", "ENV_DB", "database_url", "describe", "open_store"]

#: The environment variable naming the database (``--db`` wins).
ENV_DB = "BROWSER_MEMORY_DB"
#: The database when neither ``--db`` nor :data:`ENV_DB` is given: an embedded SQLite file.
DEFAULT_DB = "sqlite:///data/browser_memory.sqlite3"
#: The PostgreSQL schema / MongoDB database when none is given.
DEFAULT_SCHEMA = migrate.DEFAULT_SCHEMA

_MONGO_SCHEMES = ("mongodb://", "mongodb+srv://")


def database_url(given: str | None = None) -> str:
    """``given``, else :data:`ENV_DB`, else :data:`DEFAULT_DB`."""
    return given or os.environ.get(ENV_DB) or DEFAULT_DB


def open_store(url: str, schema: str | None = None) -> MemoryStore:
    """A store on ``url`` (not initialised yet: the first operation migrates SQL databases).

    Raises:
        ValueError: ``url`` is neither a SQLite, PostgreSQL nor MongoDB URL
            (the message hides any password).
    """
    if url.startswith(_MONGO_SCHEMES):
        from firefly_orm import MongoDBStore

        return MongoDBStore(url, database=schema or DEFAULT_SCHEMA)
    if "://" not in url:
        url = f"sqlite:///{url}"
    parsed = migrate.normalize_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise ValueError("a SQLite URL needs a file: sqlite:///path/to/file.sqlite3")
        from firefly_orm import SQLiteStore

        return SQLiteStore(Path(parsed.database))
    if backend == "postgresql":
        from firefly_orm import PostgreSQLStore

        return PostgreSQLStore(parsed, schema_name=schema or DEFAULT_SCHEMA)
    raise ValueError(f"not a SQLite, PostgreSQL or MongoDB URL: {redact_url(url)}")


def describe(url: str, schema: str | None = None) -> str:
    """``url`` without its password, with the schema or database when it has one."""
    shown = redact_url(url)
    if url.startswith(_MONGO_SCHEMES) or url.startswith(("postgres://", "postgresql")):
        return f"{shown} ({schema or DEFAULT_SCHEMA})"
    return shown
