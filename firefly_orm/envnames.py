"""The environment variables firefly_orm reads, named in one place.

Every variable is ``FIREFLY_AGENTIC_MEMORY_<FIELD>``, where ``<FIELD>`` is the
upper-cased name of a :class:`firefly_orm.config.MemorySettings` field; the
settings model reads them all through pydantic-settings with :data:`ENV_PREFIX`,
and the modules that read one directly (the CLI, the Alembic environment, the
LLM summarizer) use the constants below, each derived with :func:`env_var`.

This module imports nothing but :mod:`os` on purpose: any module (even the
light ``summarization``) may import it at import time, and it can never be
part of an import cycle.
"""

from __future__ import annotations

import os

__all__ = [
    "ENV_ENCRYPTION_KEYS",
    "ENV_POSTGRES_SCHEMA",
    "ENV_POSTGRES_URL",
    "ENV_PREFIX",
    "ENV_SQLITE_PATH",
    "ENV_SUMMARY_MODEL",
    "MAX_TIMEOUT_SECONDS",
    "database_url_from_env",
    "database_url_variable",
    "env_var",
]

#: Prefix of every environment variable read by ``MemorySettings``.
ENV_PREFIX = "FIREFLY_AGENTIC_MEMORY_"


def env_var(field_name: str) -> str:
    """The environment variable that sets the settings field ``field_name``."""
    return f"{ENV_PREFIX}{field_name.upper()}"


#: SQLAlchemy URL of the PostgreSQL backend (also the CLI's and Alembic's default database).
ENV_POSTGRES_URL = env_var("postgres_url")
#: Database file of the SQLite backend (the CLI's and Alembic's fallback database).
ENV_SQLITE_PATH = env_var("sqlite_path")
#: Schema holding the tables on PostgreSQL.
ENV_POSTGRES_SCHEMA = env_var("postgres_schema")
#: pydantic-ai model name of the LLM summarizer.
ENV_SUMMARY_MODEL = env_var("summary_model")
#: The keys of field-level encryption (``kid:base64key,...``, the current key first),
#: read by :meth:`firefly_orm.privacy.KeyRing.from_env`.
ENV_ENCRYPTION_KEYS = env_var("encryption_keys")


#: The longest timeout accepted, in seconds (libpq's ``connect_timeout`` is a C ``int``).
#: Here so the SQL stores and the settings both read it (``firefly_orm.config`` re-exports it).
MAX_TIMEOUT_SECONDS = float(2**31 - 1)


def database_url_from_env() -> str | None:
    """The database URL the environment names, or ``None``.

    :data:`ENV_POSTGRES_URL` when set and non-empty, else a ``sqlite:///`` URL
    of :data:`ENV_SQLITE_PATH` when that is set, else ``None``.  Used by the
    ``firefly-orm`` CLI and by the Alembic environment when no URL is given.
    """
    url = os.environ.get(ENV_POSTGRES_URL)
    if url:
        return url
    path = os.environ.get(ENV_SQLITE_PATH)
    if path:
        return f"sqlite:///{path}"
    return None


def database_url_variable() -> str | None:
    """The variable :func:`database_url_from_env` takes its URL from now, or ``None``.

    So an error about that database can name the variable to fix.
    """
    if os.environ.get(ENV_POSTGRES_URL):
        return ENV_POSTGRES_URL
    if os.environ.get(ENV_SQLITE_PATH):
        return ENV_SQLITE_PATH
    return None
