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

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from firefly_orm.envnames import ENV_PREFIX, MAX_TIMEOUT_SECONDS
from firefly_orm.envnames import env_var as env_var  # public here too, as before
from firefly_orm.errors import (
    DatabaseConnectionError,
    EntryValidationError,
    FireflyOrmError,
    MissingExtraError,
    StoreError,
    redact_url,
    scrub_secret,
    url_secrets,
)
from firefly_orm.long_term._memory import DEFAULT_NAMESPACE, MAX_RETENTION_DAYS
from firefly_orm.long_term.promotion import DEFAULT_IMPORTANCE_THRESHOLD

if TYPE_CHECKING:
    from firefly_orm.mongo import MongoDBStore
    from firefly_orm.protocols import MemoryStore, StoreLifecycle
    from firefly_orm.redis import RedisStore
    from firefly_orm.sql import PostgreSQLStore

__all__ = [
    "BACKENDS",
    "ENV_PREFIX",
    "Backend",
    "ConfigurationError",
    "MAX_TIMEOUT_SECONDS",
    "MemorySettings",
    "async_build_store",
    "build_store",
    "load_settings",
]

logger = logging.getLogger("firefly_orm")

Backend = Literal["in_memory", "file", "sqlite", "postgres", "mongodb", "redis"]
#: The backend names ``FIREFLY_AGENTIC_MEMORY_BACKEND`` accepts.
BACKENDS: tuple[str, ...] = get_args(Backend)


class ConfigurationError(FireflyOrmError, ValueError):
    """The configuration is invalid or incomplete (the message names the variable)."""


def _path_problem(path: Path, *, directory: bool) -> str | None:
    """Why ``path`` cannot be used as a directory (or a file), judged now; ``None`` if it can.

    An existing path of the wrong kind, or an existing ancestor that is not a
    directory, is refused; a path that does not exist yet is fine (it is created).
    """
    if path.exists():
        if directory and not path.is_dir():
            return f"{path} exists and is not a directory"
        if not directory and path.is_dir():
            return f"{path} is a directory, not a database file"
        return None
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else f"{parent} exists and is not a directory"
    return None


class MemorySettings(BaseSettings):
    """Memory configuration, read from ``FIREFLY_AGENTIC_MEMORY_*`` variables.

    Attributes:
        backend: ``in_memory`` (default), ``file``, ``sqlite``, ``postgres``,
            ``mongodb`` or ``redis``; case and surrounding blanks are ignored.
        max_conversation_tokens: Token budget of a conversation's history.
        summarize_threshold: Token total above which the oldest turns are
            evicted (and summarised when a summarizer is configured), down to it;
            unset (the default): above ``max_conversation_tokens``.
        max_messages: At most this many model messages per conversation
            (unset: no limit).
        pin_count: The first turns of a conversation that are never evicted.
        recent_count: The newest turns an eviction keeps (the middle goes at once).
        long_term_namespace: Namespace of the manager's long-term items.
        long_term_limit: At most this many long-term items per user (unset: no limit).
        episodic_retention_days: Episodic long-term items expire after this many
            days (unset: never).
        search_language: PostgreSQL text-search configuration of long-term
            items (unset: ``simple``).
        auto_promote: Promote evicted conversation turns to long-term memory.
        conversation_text_search: Index conversation turns for text search
            (``ConversationMemory(text_search=...)``); ``false``: cheaper appends,
            turns not found by search (not with ``embedding_model``).
        importance_threshold: The lowest promotion score promoted (0.0-1.0).
        summary_model: pydantic-ai model name for the LLM summarizer; when set,
            ``MemoryManager.from_config()`` builds one with
            :func:`firefly_orm.summarization.create_llm_summarizer`.
        embedding_model: pydantic-ai embedding model name (e.g.
            ``openai:text-embedding-3-small``); when set, long-term memory
            recalls by meaning too (``LongTermMemory(embedder=...)``) and the
            SQL stores are built with ``vectors=True`` (the vector tables
            migrated; PostgreSQL needs pgvector).
        file_dir: Directory of the ``file`` backend.
        sqlite_path: Database file of the ``sqlite`` backend; defaults to
            ``<file_dir>/memory.sqlite3``.
        postgres_url: SQLAlchemy URL of the ``postgres`` backend (required for it).
        postgres_pool_size: Maximum connections of the Postgres pool.
        postgres_pool_min_size: Connections kept open in the Postgres pool.
        postgres_timeout: Seconds to wait for a Postgres connection (finite, positive,
            at most :data:`MAX_TIMEOUT_SECONDS`).
        postgres_schema: Schema holding the tables.
        mongodb_url: MongoDB connection string (required for ``mongodb``).
        mongodb_database: MongoDB database name.
        mongodb_collection: MongoDB collection name.
        mongodb_pool_size: Maximum connections of the MongoDB client.
        redis_url: Redis URL (``redis://``, ``rediss://`` or ``unix://``;
            required for ``redis``).
        redis_prefix: The first part of every key the Redis store writes.
        redis_socket_timeout: Seconds a Redis command may wait for the server.
        encryption_keys: The keys of field-level encryption, ``kid:base64key``
            separated by commas, the current key first (read by
            :meth:`firefly_orm.privacy.KeyRing.from_env`; stores are not
            encrypted unless wrapped with :func:`firefly_orm.privacy.protect`).
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
    summarize_threshold: int | None = Field(default=None, ge=0)
    max_messages: int | None = Field(default=None, ge=1)
    pin_count: int = Field(default=0, ge=0)
    recent_count: int = Field(default=0, ge=0)
    long_term_namespace: str = DEFAULT_NAMESPACE
    long_term_limit: int | None = Field(default=None, ge=1)
    episodic_retention_days: float | None = Field(
        default=None, gt=0, le=MAX_RETENTION_DAYS, allow_inf_nan=False
    )
    search_language: str | None = None
    auto_promote: bool = False
    conversation_text_search: bool = True
    importance_threshold: float = Field(
        default=DEFAULT_IMPORTANCE_THRESHOLD, ge=0.0, le=1.0, allow_inf_nan=False
    )
    summary_model: str | None = None
    embedding_model: str | None = None
    file_dir: str = ".firefly_memory"
    sqlite_path: str | None = None
    postgres_url: str | None = None
    postgres_pool_size: int = Field(default=10, ge=1)
    postgres_pool_min_size: int = Field(default=2, ge=0)
    postgres_timeout: float = Field(default=30.0, gt=0, le=MAX_TIMEOUT_SECONDS, allow_inf_nan=False)
    postgres_schema: str = "firefly_memory"
    mongodb_url: str | None = None
    mongodb_database: str = "firefly_memory"
    mongodb_collection: str = "entries"
    mongodb_pool_size: int = Field(default=10, ge=1)
    redis_url: str | None = None
    redis_prefix: str = "firefly"
    redis_socket_timeout: float = Field(default=30.0, gt=0, lt=10**6, allow_inf_nan=False)
    encryption_keys: SecretStr | None = None

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

    @field_validator(
        "postgres_url",
        "mongodb_url",
        "redis_url",
        "summary_model",
        "embedding_model",
        "sqlite_path",
        "long_term_limit",
        "episodic_retention_days",
        "search_language",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @property
    def vectors(self) -> bool:
        """Whether the store keeps vectors (an ``embedding_model`` is set)."""
        return self.embedding_model is not None

    @field_validator("long_term_namespace", "search_language")
    @classmethod
    def _valid_long_term_names(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        from firefly_orm.entry import validate_namespace, validate_search_language

        try:
            if info.field_name == "long_term_namespace":
                return validate_namespace(value)
            return validate_search_language(value, "search_language")
        except EntryValidationError as exc:
            raise ValueError(str(exc).removeprefix(f"{exc.field}: ")) from None

    @field_validator("postgres_schema")
    @classmethod
    def _valid_schema(cls, value: str, info: ValidationInfo) -> str:
        # Checked (with the store's own rule) only when the postgres backend uses it.
        if info.data.get("backend") == "postgres":
            from firefly_orm import migrate

            try:
                migrate.validate_schema_name(value)
            except EntryValidationError as exc:
                raise ValueError(str(exc).removeprefix(f"{exc.field}: ")) from None
        return value

    @field_validator("mongodb_url")
    @classmethod
    def _mongodb_scheme(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Only the scheme (parsing a mongodb+srv:// URL would query DNS); the
        # message never repeats the value, which may hold a password.
        if (
            info.data.get("backend") == "mongodb"
            and value is not None
            and not value.strip().lower().startswith(("mongodb://", "mongodb+srv://"))
        ):
            raise ValueError("not a MongoDB URL: it must begin with mongodb:// or mongodb+srv://")
        if info.data.get("backend") == "mongodb" and value is not None:
            try:
                from firefly_orm.mongo._document import validate_url
            except ImportError:  # the store build reports the missing extra
                return value
            try:
                validate_url(value, strict=True)  # hosts, port, options; no I/O
            except EntryValidationError as exc:
                raise ValueError(str(exc).removeprefix(f"{exc.field}: ")) from None
        return value

    @field_validator("mongodb_database", "mongodb_collection")
    @classmethod
    def _valid_mongodb_names(cls, value: str, info: ValidationInfo) -> str:
        # Checked (with the store's own rules) only when the mongodb backend uses them.
        if info.data.get("backend") != "mongodb":
            return value
        try:
            from firefly_orm.mongo._document import (
                validate_collection_name,
                validate_database_name,
            )
        except ImportError:  # the store build reports the missing extra
            return value
        try:
            if info.field_name == "mongodb_database":
                validate_database_name(value)
            else:
                validate_collection_name(value, str(info.data.get("mongodb_database", "")))
        except EntryValidationError as exc:
            raise ValueError(str(exc).removeprefix(f"{exc.field}: ")) from None
        return value

    @model_validator(mode="after")
    def _paths_are_usable(self) -> MemorySettings:
        # A file where a directory is expected (or the reverse) is refused before any I/O.
        if self.backend == "file":
            problem = _path_problem(Path(self.file_dir), directory=True)
            if problem is not None:
                raise ValueError(f"{env_var('file_dir')}: {problem}")
        if self.backend == "sqlite":
            problem = _path_problem(self.resolved_sqlite_path(), directory=False)
            if problem is not None:
                raise ValueError(f"{_sqlite_variable(self)}: {problem}")
        return self

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
            if name in _URL_FIELDS and value is not None:
                yield name, redact_url(value)
            else:
                yield name, value


_URL_FIELDS = frozenset({"postgres_url", "mongodb_url", "redis_url"})


def load_settings(**overrides: Any) -> MemorySettings:
    """Read :class:`MemorySettings` from the environment now (no caching).

    Args:
        **overrides: Field values that win over the environment.

    Raises:
        ConfigurationError: A value is invalid; the message names the variable.
    """
    problems: list[str] = []
    try:
        return MemorySettings(**overrides)
    except ValidationError as exc:
        for err in exc.errors():
            message = str(err["msg"]).removeprefix("Value error, ")
            if not err["loc"]:  # a check across fields; its message names the variables
                problems.append(message)
                continue
            field = str(err["loc"][0])
            if field in _URL_FIELDS and err["type"] != "value_error":
                # The input may hold a password: report the problem, never the value
                # (our own validators' messages never repeat it).
                message = str(err["type"])
            problems.append(message if field == "backend" else f"{env_var(field)}: {message}")
    # Raised outside the handler: pydantic's error (which repeats each input,
    # passwords included) must not stay reachable as ``__context__``.
    raise ConfigurationError("invalid memory configuration: " + "; ".join(problems))


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
        f"{scrub_secret(f'{type(exc).__name__}: {exc}', url_secrets(url))}"
    )


#: Store-constructor argument -> the settings field (and so the variable) it came from.
_POSTGRES_ARGS = {
    "url": "postgres_url",
    "schema_name": "postgres_schema",
    "pool_size": "postgres_pool_size",
    "pool_min_size": "postgres_pool_min_size",
    "timeout": "postgres_timeout",
    "vectors": "vectors",
}


_MONGODB_ARGS = {
    "url": "mongodb_url",
    "database": "mongodb_database",
    "collection": "mongodb_collection",
    "pool_size": "mongodb_pool_size",
}

_REDIS_ARGS = {
    "url": "redis_url",
    "prefix": "redis_prefix",
    "socket_timeout": "redis_socket_timeout",
}


@dataclass(frozen=True)
class _ServerBackend:
    """A backend whose store connects to a database server at a URL."""

    module: str  # where its store class is, imported only when the backend is chosen
    store: str  # the store class
    extra: str  # the optional dependencies it needs (``pip install firefly-orm[<extra>]``)
    fields: dict[str, str]  # store-constructor argument -> settings field


_SERVER_BACKENDS: dict[str, _ServerBackend] = {
    "postgres": _ServerBackend("firefly_orm.sql", "PostgreSQLStore", "postgres", _POSTGRES_ARGS),
    "mongodb": _ServerBackend("firefly_orm.mongo", "MongoDBStore", "mongo", _MONGODB_ARGS),
    "redis": _ServerBackend("firefly_orm.redis", "RedisStore", "redis", _REDIS_ARGS),
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


def _constructor_error(
    exc: EntryValidationError, fields: dict[str, str], url_field: str, url: str
) -> ConfigurationError:
    """A store constructor's complaint, naming the variable (not the argument), no secret."""
    field = fields.get(exc.field, url_field)
    message = scrub_secret(str(exc).removeprefix(f"{exc.field}: "), url_secrets(url))
    return ConfigurationError(f"{env_var(field)}: {message}")


def _server_store(
    settings: MemorySettings, server: _ServerBackend
) -> tuple[MemoryStore, StoreLifecycle, str]:
    """The store of a database backend, every constructor argument from its settings field.

    Raises:
        ConfigurationError: The URL is not set, or the constructor refused an
            argument (naming the variable it came from: :func:`_constructor_error`).
        MissingExtraError: The backend's optional dependencies are not installed.
    """
    fields = server.fields
    url = _require(settings, fields["url"])
    try:
        module = importlib.import_module(server.module)
    except ImportError as exc:
        raise MissingExtraError(f"the {settings.backend} memory backend", server.extra) from exc
    open_store: Callable[..., PostgreSQLStore | MongoDBStore | RedisStore]
    open_store = getattr(module, server.store)
    options = {arg: getattr(settings, field) for arg, field in fields.items() if arg != "url"}
    try:
        store = open_store(url, **options)
    except EntryValidationError as exc:
        raise _constructor_error(exc, fields, fields["url"], url) from None
    return store, store, url


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

        try:
            return FileStore(settings.file_dir), None, None
        except (OSError, StoreError) as exc:
            raise ConfigurationError(
                f"{env_var('file_dir')}: cannot use {settings.file_dir} as the FileStore "
                f"directory: {exc.__cause__ or exc}"
            ) from exc
    if backend == "sqlite":
        from firefly_orm.sql import SQLiteStore

        try:
            sqlite = SQLiteStore(settings.resolved_sqlite_path(), vectors=settings.vectors)
        except (OSError, EntryValidationError) as exc:
            raise _unusable_sqlite(settings, exc) from exc
        return sqlite, sqlite, None
    if backend in _SERVER_BACKENDS:
        return _server_store(settings, _SERVER_BACKENDS[backend])
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
        return _name_variable(settings, exc)
    return _name_variable(settings, _init_failed(settings.backend, url or "", exc))


def build_store(settings: MemorySettings | None = None) -> MemoryStore:
    """Build (and initialise) the store that ``settings`` describe.

    Database stores (SQLite, PostgreSQL, MongoDB, Redis) are initialised with
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


#: The variable holding the URL of each database backend.
_URL_VARIABLES = {"postgres": "postgres_url", "mongodb": "mongodb_url", "redis": "redis_url"}


def _name_variable(settings: MemorySettings, exc: FireflyOrmError) -> FireflyOrmError:
    """A connection failure that names the variable to fix (the SQLite file, or the URL).

    The store's message already hides the URL's password.
    """
    if settings.backend == "sqlite" and isinstance(exc, DatabaseConnectionError):
        return DatabaseConnectionError(
            f"{_sqlite_variable(settings)}: cannot open {settings.resolved_sqlite_path()}: {exc}"
        )
    field = _URL_VARIABLES.get(settings.backend)
    if field is None or type(exc) not in (DatabaseConnectionError, StoreError):
        return exc
    return type(exc)(f"{env_var(field)}: {exc}")


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
