"""Settings from the environment (``FIREFLY_AGENTIC_MEMORY_*``) and the store they build.

:class:`MemorySettings` is a pydantic-settings model; each field is read from the
environment variable ``FIREFLY_AGENTIC_MEMORY_<FIELD NAME IN CAPITALS>``::

    FIREFLY_AGENTIC_MEMORY_BACKEND=postgres
    FIREFLY_AGENTIC_MEMORY_POSTGRES_URL=postgresql+psycopg://app:secret@db/app

Differences from the module this library is modelled on, on purpose:

* an unknown backend name is an error that names the variable and the allowed
  values (never a silent fallback to process memory), and ``sqlite`` is a backend;
* no ``.env`` file is read from the working directory unless you ask for one
  (``MemorySettings(_env_file=".env")``);
* nothing is cached: :func:`load_settings` (and so ``MemoryManager.from_config()``)
  reads the environment every time it is called.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from firefly_orm.envnames import ENV_PREFIX
from firefly_orm.envnames import env_var as env_var  # public here too, as before
from firefly_orm.errors import (
    DatabaseConnectionError,
    EntryValidationError,
    FireflyOrmError,
    MissingExtraError,
    redact_url,
    scrub_secret,
    url_password,
)

if TYPE_CHECKING:
    from firefly_orm.protocols import MemoryStore, StoreLifecycle

__all__ = [
    "BACKENDS",
    "ENV_PREFIX",
    "Backend",
    "ConfigurationError",
    "MemorySettings",
    "async_build_store",
    "build_store",
    "load_settings",
]

logger = logging.getLogger("firefly_orm")

Backend = Literal["in_memory", "file", "sqlite", "postgres", "mongodb"]
#: The backend names ``FIREFLY_AGENTIC_MEMORY_BACKEND`` accepts.
BACKENDS: tuple[str, ...] = get_args(Backend)


class ConfigurationError(FireflyOrmError, ValueError):
    """The configuration is invalid or incomplete (the message names the variable)."""


class MemorySettings(BaseSettings):
    """Memory configuration, read from ``FIREFLY_AGENTIC_MEMORY_*`` variables.

    Attributes:
        backend: ``in_memory`` (default), ``file``, ``sqlite``, ``postgres`` or
            ``mongodb``; case and surrounding blanks are ignored.
        max_conversation_tokens: Token budget of a conversation's history.
        summarize_threshold: Token total above which evicted turns are summarised
            (when a summarizer is configured).
        summary_model: pydantic-ai model name for the LLM summarizer; when set,
            ``MemoryManager.from_config()`` builds one with
            :func:`firefly_orm.summarization.create_llm_summarizer`.
        file_dir: Directory of the ``file`` backend.
        sqlite_path: Database file of the ``sqlite`` backend; defaults to
            ``<file_dir>/memory.sqlite3``.
        postgres_url: SQLAlchemy URL of the ``postgres`` backend (required for it).
        postgres_pool_size: Maximum connections of the Postgres pool.
        postgres_pool_min_size: Connections kept open in the Postgres pool.
        postgres_timeout: Seconds to wait for a Postgres connection.
        postgres_schema: Schema holding the tables.
        mongodb_url: MongoDB connection string (required for ``mongodb``).
        mongodb_database: MongoDB database name.
        mongodb_collection: MongoDB collection name.
        mongodb_pool_size: Maximum connections of the MongoDB client.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=None,
        extra="ignore",
        case_sensitive=False,
        validate_default=True,
    )

    backend: Backend = "in_memory"
    max_conversation_tokens: int = Field(default=128_000, ge=1)
    summarize_threshold: int = Field(default=10, ge=0)
    summary_model: str | None = None
    file_dir: str = ".firefly_memory"
    sqlite_path: str | None = None
    postgres_url: str | None = None
    postgres_pool_size: int = Field(default=10, ge=1)
    postgres_pool_min_size: int = Field(default=2, ge=0)
    postgres_timeout: float = Field(default=30.0, gt=0)
    postgres_schema: str = "firefly_memory"
    mongodb_url: str | None = None
    mongodb_database: str = "firefly_memory"
    mongodb_collection: str = "entries"
    mongodb_pool_size: int = Field(default=10, ge=1)

    @field_validator("backend", mode="before")
    @classmethod
    def _normalise_backend(cls, value: Any) -> Any:
        if isinstance(value, str):
            name = value.strip().lower()
            if name not in BACKENDS:
                raise ValueError(
                    f"{env_var('backend')}={value!r} is not a known backend; "
                    f"choose one of: {', '.join(BACKENDS)}"
                )
            return name
        return value

    @field_validator("postgres_url", "mongodb_url", "summary_model", "sqlite_path", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @model_validator(mode="after")
    def _pool_sizes_agree(self) -> MemorySettings:
        # Only the postgres backend uses the pool; other backends ignore these values.
        if self.backend == "postgres" and self.postgres_pool_min_size > self.postgres_pool_size:
            raise ValueError(
                f"{env_var('postgres_pool_min_size')} ({self.postgres_pool_min_size}) must not "
                f"exceed {env_var('postgres_pool_size')} ({self.postgres_pool_size})"
            )
        return self

    def resolved_sqlite_path(self) -> Path:
        """The SQLite database file: ``sqlite_path`` or ``<file_dir>/memory.sqlite3``."""
        if self.sqlite_path is not None:
            return Path(self.sqlite_path)
        return Path(self.file_dir) / "memory.sqlite3"

    def __repr_args__(self) -> Any:
        # Never show passwords in reprs (logs, tracebacks).
        for name, value in super().__repr_args__():
            if name in ("postgres_url", "mongodb_url") and value is not None:
                yield name, redact_url(value)
            else:
                yield name, value


_URL_FIELDS = frozenset({"postgres_url", "mongodb_url"})


def load_settings(**overrides: Any) -> MemorySettings:
    """Read :class:`MemorySettings` from the environment now (no caching).

    Args:
        **overrides: Field values that win over the environment.

    Raises:
        ConfigurationError: A value is invalid; the message names the variable.
    """
    try:
        return MemorySettings(**overrides)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            message = str(err["msg"]).removeprefix("Value error, ")
            if not err["loc"]:  # a check across fields; its message names the variables
                problems.append(message)
                continue
            field = str(err["loc"][0])
            if field in _URL_FIELDS:
                # The input may hold a password: report the problem, never the value.
                message = str(err["type"])
            problems.append(message if field == "backend" else f"{env_var(field)}: {message}")
        raise ConfigurationError("invalid memory configuration: " + "; ".join(problems)) from None


# --------------------------------------------------------------------------- building stores


def _require(settings: MemorySettings, field: str) -> str:
    value = getattr(settings, field)
    if value is None:
        raise ConfigurationError(
            f"the {settings.backend!r} memory backend needs {env_var(field)} to be set"
        )
    return str(value)


def _init_failed(backend: str, url: str, exc: Exception) -> DatabaseConnectionError:
    return DatabaseConnectionError(
        f"could not initialise the {backend} memory store at {redact_url(url)}: "
        f"{scrub_secret(f'{type(exc).__name__}: {exc}', url_password(url))}"
    )


#: Store-constructor argument -> the settings field (and so the variable) it came from.
_POSTGRES_ARGS = {
    "url": "postgres_url",
    "schema_name": "postgres_schema",
    "pool_size": "postgres_pool_size",
    "pool_min_size": "postgres_pool_min_size",
    "timeout": "postgres_timeout",
}


def _sqlite_variable(settings: MemorySettings) -> str:
    """The variable that chose the SQLite file (its own, or the file directory)."""
    return env_var("sqlite_path" if settings.sqlite_path is not None else "file_dir")


def _unusable_sqlite(settings: MemorySettings, exc: Exception) -> ConfigurationError:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return ConfigurationError(
        f"{_sqlite_variable(settings)}: cannot use {settings.resolved_sqlite_path()} "
        f"as the SQLite database: {reason}"
    )


def _construct(
    settings: MemorySettings,
) -> tuple[MemoryStore, StoreLifecycle | None, str | None]:
    """Build the store that ``settings`` describe (not yet initialised).

    Returns the store, its lifecycle when it opens a database (``None`` for the
    in-memory and file stores, which need no start-up) and the URL it connects
    to (for messages; ``None`` without one).
    """
    backend = settings.backend
    if backend == "in_memory":
        from firefly_orm.store import InMemoryStore

        return InMemoryStore(), None, None
    if backend == "file":
        from firefly_orm.file_store import FileStore

        return FileStore(settings.file_dir), None, None
    if backend == "sqlite":
        from firefly_orm.sql import SQLiteStore

        try:
            sqlite = SQLiteStore(settings.resolved_sqlite_path())
        except (OSError, EntryValidationError) as exc:
            raise _unusable_sqlite(settings, exc) from exc
        return sqlite, sqlite, None
    if backend == "postgres":
        url = _require(settings, "postgres_url")
        try:
            from firefly_orm.sql import PostgreSQLStore
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise MissingExtraError("the postgres memory backend", "postgres") from exc
        try:
            store = PostgreSQLStore(
                url,
                pool_size=settings.postgres_pool_size,
                pool_min_size=settings.postgres_pool_min_size,
                timeout=settings.postgres_timeout,
                schema_name=settings.postgres_schema,
            )
        except EntryValidationError as exc:
            # Name the variable, not the constructor argument; never show the password.
            field = _POSTGRES_ARGS.get(exc.field, "postgres_url")
            message = scrub_secret(str(exc).removeprefix(f"{exc.field}: "), url_password(url))
            raise ConfigurationError(f"{env_var(field)}: {message}") from None
        return store, store, url
    if backend == "mongodb":
        url = _require(settings, "mongodb_url")
        try:
            from firefly_orm.mongo import MongoDBStore
        except ImportError as exc:
            raise MissingExtraError("the mongodb memory backend", "mongo") from exc
        mongo = MongoDBStore(
            url,
            database=settings.mongodb_database,
            collection=settings.mongodb_collection,
            pool_size=settings.mongodb_pool_size,
        )
        return mongo, mongo, url
    raise ConfigurationError(  # pragma: no cover - the Literal type rules this out
        f"{env_var('backend')}={backend!r} is not a known backend"
    )


def _close_quietly(lifecycle: StoreLifecycle) -> None:
    """Close a store whose initialisation failed; a failure to close is only logged."""
    try:
        lifecycle.close()
    except Exception:  # pragma: no cover - best effort while reporting another error
        logger.debug("closing a store that failed to initialise raised", exc_info=True)


async def _async_close_quietly(lifecycle: StoreLifecycle) -> None:
    """Async form of :func:`_close_quietly` (closes with ``async_close()``)."""
    try:
        await lifecycle.async_close()
    except Exception:  # pragma: no cover - best effort while reporting another error
        logger.debug("closing a store that failed to initialise raised", exc_info=True)


def _init_error(settings: MemorySettings, url: str | None, exc: Exception) -> FireflyOrmError:
    """The error to raise for a failed initialisation (naming the SQLite variable)."""
    if isinstance(exc, FireflyOrmError):
        return _name_sqlite_variable(settings, exc)
    return _name_sqlite_variable(settings, _init_failed(settings.backend, url or "", exc))


def build_store(settings: MemorySettings | None = None) -> MemoryStore:
    """Build (and initialise) the store that ``settings`` describe.

    Database stores (SQLite, PostgreSQL, MongoDB) are initialised with
    ``.initialize()`` (which migrates the schema) before they are returned, so a
    bad URL or an unreachable server fails here, not at the first write.

    Args:
        settings: The settings; read from the environment now when omitted.

    Raises:
        ConfigurationError: A setting the backend needs is missing or invalid.
        MissingExtraError: The backend's optional dependencies are not installed.
        DatabaseConnectionError: The database could not be initialised (the URL in
            the message has its password hidden).
    """
    settings = settings if settings is not None else load_settings()
    store, lifecycle, url = _construct(settings)
    if lifecycle is not None:
        try:
            lifecycle.initialize()
        except Exception as exc:
            _close_quietly(lifecycle)
            error = _init_error(settings, url, exc)
            if error is exc:
                raise
            raise error from exc
    return store


def _name_sqlite_variable(settings: MemorySettings, exc: FireflyOrmError) -> FireflyOrmError:
    """For the sqlite backend, a connection failure that names the variable to fix."""
    if settings.backend != "sqlite" or not isinstance(exc, DatabaseConnectionError):
        return exc
    return DatabaseConnectionError(
        f"{_sqlite_variable(settings)}: cannot open {settings.resolved_sqlite_path()}: {exc}"
    )


async def async_build_store(settings: MemorySettings | None = None) -> MemoryStore:
    """Async form of :func:`build_store` (initialises with ``async_initialize()``).

    The start-up runs on the store's async form, so nothing blocks the event loop.
    """
    settings = settings if settings is not None else load_settings()
    store, lifecycle, url = _construct(settings)
    if lifecycle is not None:
        try:
            await lifecycle.async_initialize()
        except Exception as exc:
            await _async_close_quietly(lifecycle)
            error = _init_error(settings, url, exc)
            if error is exc:
                raise
            raise error from exc
    return store
