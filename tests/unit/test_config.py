"""MemorySettings and build_store: env at call time, clear errors, no leaked passwords."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from firefly_orm.config import (
    BACKENDS,
    ConfigurationError,
    MemorySettings,
    async_build_store,
    build_store,
    load_settings,
)
from firefly_orm.errors import DatabaseConnectionError, FireflyOrmError, MissingExtraError
from firefly_orm.store import InMemoryStore, MemoryStore

P = "FIREFLY_AGENTIC_MEMORY_"
SECRET = "S3cretPw"


# --------------------------------------------------------------------------- settings


def test_defaults(env: pytest.MonkeyPatch) -> None:
    s = load_settings()
    assert s.backend == "in_memory"
    assert s.max_conversation_tokens == 128_000
    assert s.summarize_threshold is None  # no threshold: eviction above the budget
    assert s.file_dir == ".firefly_memory"
    assert s.sqlite_path is None
    assert s.resolved_sqlite_path() == Path(".firefly_memory") / "memory.sqlite3"
    assert s.postgres_url is None
    assert (s.postgres_pool_size, s.postgres_pool_min_size) == (10, 2)
    assert s.postgres_schema == "firefly_memory"
    assert s.mongodb_url is None
    assert (s.mongodb_database, s.mongodb_collection, s.mongodb_pool_size) == (
        "firefly_memory",
        "entries",
        10,
    )
    assert s.summary_model is None


@pytest.mark.parametrize(
    ("var", "raw", "field", "expected"),
    [
        ("BACKEND", "postgres", "backend", "postgres"),
        ("BACKEND", "  MongoDB ", "backend", "mongodb"),
        ("MAX_CONVERSATION_TOKENS", "4096", "max_conversation_tokens", 4096),
        ("SUMMARIZE_THRESHOLD", "3000", "summarize_threshold", 3000),
        ("FILE_DIR", "/tmp/x", "file_dir", "/tmp/x"),
        ("SQLITE_PATH", "/tmp/x.db", "sqlite_path", "/tmp/x.db"),
        ("POSTGRES_URL", "postgresql://u@h/d", "postgres_url", "postgresql://u@h/d"),
        ("POSTGRES_POOL_SIZE", "20", "postgres_pool_size", 20),
        ("POSTGRES_POOL_MIN_SIZE", "5", "postgres_pool_min_size", 5),
        ("POSTGRES_TIMEOUT", "2.5", "postgres_timeout", 2.5),
        ("POSTGRES_SCHEMA", "agents", "postgres_schema", "agents"),
        ("MONGODB_URL", "mongodb://h", "mongodb_url", "mongodb://h"),
        ("MONGODB_DATABASE", "db1", "mongodb_database", "db1"),
        ("MONGODB_COLLECTION", "c1", "mongodb_collection", "c1"),
        ("MONGODB_POOL_SIZE", "7", "mongodb_pool_size", 7),
        ("SUMMARY_MODEL", "openai:gpt-4o-mini", "summary_model", "openai:gpt-4o-mini"),
        ("MAX_MESSAGES", "40", "max_messages", 40),
        ("PIN_COUNT", "2", "pin_count", 2),
        ("RECENT_COUNT", "6", "recent_count", 6),
        ("LONG_TERM_NAMESPACE", "facts", "long_term_namespace", "facts"),
        ("LONG_TERM_LIMIT", "500", "long_term_limit", 500),
        ("LONG_TERM_LIMIT", " ", "long_term_limit", None),
        ("EPISODIC_RETENTION_DAYS", "7.5", "episodic_retention_days", 7.5),
        ("SEARCH_LANGUAGE", "english", "search_language", "english"),
        ("AUTO_PROMOTE", "true", "auto_promote", True),
        ("AUTO_PROMOTE", "0", "auto_promote", False),
        ("IMPORTANCE_THRESHOLD", "0.75", "importance_threshold", 0.75),
        ("CONVERSATION_TEXT_SEARCH", "false", "conversation_text_search", False),
        ("CONVERSATION_TEXT_SEARCH", "1", "conversation_text_search", True),
    ],
)
def test_each_variable(
    env: pytest.MonkeyPatch, var: str, raw: str, field: str, expected: Any
) -> None:
    env.setenv(P + var, raw)
    assert getattr(load_settings(), field) == expected


def test_blank_url_is_unset(env: pytest.MonkeyPatch) -> None:
    env.setenv(P + "POSTGRES_URL", "  ")
    assert load_settings().postgres_url is None


def test_read_at_call_time(env: pytest.MonkeyPatch) -> None:
    env.setenv(P + "MAX_CONVERSATION_TOKENS", "100")
    assert load_settings().max_conversation_tokens == 100
    env.setenv(P + "MAX_CONVERSATION_TOKENS", "200")
    assert load_settings().max_conversation_tokens == 200
    env.delenv(P + "MAX_CONVERSATION_TOKENS")
    assert load_settings().max_conversation_tokens == 128_000


def test_overrides_win(env: pytest.MonkeyPatch) -> None:
    env.setenv(P + "BACKEND", "file")
    assert load_settings(backend="sqlite").backend == "sqlite"


@pytest.mark.parametrize("bad", ["sqllite", "postgresql", "in-memory", "", "none"])
def test_unknown_backend(env: pytest.MonkeyPatch, bad: str) -> None:
    env.setenv(P + "BACKEND", bad)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    message = str(info.value)
    assert P + "BACKEND" in message
    assert all(name in message for name in BACKENDS)
    assert isinstance(info.value, ValueError) and isinstance(info.value, FireflyOrmError)


def test_invalid_number_names_the_variable(env: pytest.MonkeyPatch) -> None:
    env.setenv(P + "POSTGRES_POOL_SIZE", "lots")
    with pytest.raises(ConfigurationError, match=P + "POSTGRES_POOL_SIZE"):
        load_settings()
    env.setenv(P + "POSTGRES_POOL_SIZE", "0")
    with pytest.raises(ConfigurationError, match=P + "POSTGRES_POOL_SIZE"):
        load_settings()


def test_no_dotenv_from_cwd_by_default(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text(f"{P}BACKEND=sqlite\n{P}MAX_CONVERSATION_TOKENS=77\n")
    assert load_settings().backend == "in_memory"
    explicit = MemorySettings(_env_file=str(dotenv))
    assert explicit.backend == "sqlite"
    assert explicit.max_conversation_tokens == 77


def test_repr_hides_passwords(env: pytest.MonkeyPatch) -> None:
    env.setenv(P + "POSTGRES_URL", f"postgresql+psycopg://app:{SECRET}@db:5432/app")
    env.setenv(P + "MONGODB_URL", f"mongodb://app:{SECRET}@mongo:27017")
    s = load_settings()
    assert s.postgres_url is not None and SECRET in s.postgres_url  # the value is intact
    assert SECRET not in repr(s)
    assert SECRET not in str(s)


# --------------------------------------------------------------------------- build_store


def test_build_in_memory(env: pytest.MonkeyPatch) -> None:
    store: Any = build_store()
    assert isinstance(store, InMemoryStore)
    assert build_store() is not store  # no cached singleton


def test_build_file(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from firefly_orm.file_store import FileStore

    env.setenv(P + "BACKEND", "file")
    env.setenv(P + "FILE_DIR", str(tmp_path / "mem"))
    store: Any = build_store()
    assert isinstance(store, FileStore)
    assert (tmp_path / "mem").is_dir()


def test_build_sqlite_is_initialised(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sqlalchemy as sa

    from firefly_orm.sql import SQLiteStore

    path = tmp_path / "deep" / "dir" / "m.sqlite3"
    env.setenv(P + "BACKEND", "sqlite")
    env.setenv(P + "SQLITE_PATH", str(path))
    store: Any = build_store()
    try:
        assert isinstance(store, SQLiteStore)
        tables = sa.inspect(store.engine).get_table_names()
        assert "memory_entries" in tables
    finally:
        store.close()


def test_build_sqlite_default_path_under_file_dir(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv(P + "BACKEND", "sqlite")
    env.setenv(P + "FILE_DIR", str(tmp_path / "fd"))
    store: Any = build_store()
    try:
        assert (tmp_path / "fd" / "memory.sqlite3").exists()
    finally:
        store.close()


async def test_async_build_sqlite(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from firefly_orm.sql import SQLiteStore

    env.setenv(P + "BACKEND", "sqlite")
    env.setenv(P + "SQLITE_PATH", str(tmp_path / "a.sqlite3"))
    store: Any = await async_build_store()
    try:
        assert isinstance(store, SQLiteStore)
        assert await store.async_load("x") == []
    finally:
        await store.async_close()


@pytest.mark.parametrize(
    ("backend", "var"), [("postgres", "POSTGRES_URL"), ("mongodb", "MONGODB_URL")]
)
def test_missing_url(env: pytest.MonkeyPatch, backend: str, var: str) -> None:
    env.setenv(P + "BACKEND", backend)
    with pytest.raises(ValueError, match=P + var):
        build_store()


async def test_async_missing_url(env: pytest.MonkeyPatch) -> None:
    env.setenv(P + "BACKEND", "postgres")
    with pytest.raises(ConfigurationError, match=P + "POSTGRES_URL"):
        await async_build_store()


def test_mongodb_without_module_names_the_extra(env: pytest.MonkeyPatch) -> None:
    env.setenv(P + "BACKEND", "mongodb")
    env.setenv(P + "MONGODB_URL", f"mongodb://app:{SECRET}@127.0.0.1:1")
    env.setitem(sys.modules, "firefly_orm.mongo", None)
    with pytest.raises(MissingExtraError) as info:
        build_store()
    assert "'mongo'" in str(info.value)
    assert isinstance(info.value, ImportError)
    assert SECRET not in str(info.value)


def test_bad_postgres_url_hides_password(env: pytest.MonkeyPatch) -> None:
    env.setenv(P + "BACKEND", "postgres")
    env.setenv(P + "POSTGRES_URL", f"mysql://app:{SECRET}@db/app")
    with pytest.raises(FireflyOrmError) as info:
        build_store()
    assert SECRET not in str(info.value)


def test_unreachable_postgres_hides_password(env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("psycopg")
    env.setenv(P + "BACKEND", "postgres")
    env.setenv(P + "POSTGRES_URL", f"postgresql+psycopg://app:{SECRET}@127.0.0.1:1/db")
    env.setenv(P + "POSTGRES_TIMEOUT", "2")
    with pytest.raises(DatabaseConnectionError) as info:
        build_store()
    text = str(info.value)
    assert SECRET not in text
    assert "127.0.0.1" in text


def test_pool_min_size_above_pool_size(env: pytest.MonkeyPatch) -> None:
    env.setenv(P + "BACKEND", "postgres")
    env.setenv(P + "POSTGRES_POOL_SIZE", "2")
    env.setenv(P + "POSTGRES_POOL_MIN_SIZE", "5")
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert P + "POSTGRES_POOL_MIN_SIZE" in str(info.value)
    assert P + "POSTGRES_POOL_SIZE" in str(info.value)


@pytest.mark.parametrize("backend", ["in_memory", "file", "sqlite"])
def test_pool_sizes_only_checked_for_postgres(env: pytest.MonkeyPatch, backend: str) -> None:
    env.setenv(P + "BACKEND", backend)
    env.setenv(P + "POSTGRES_POOL_SIZE", "1")
    env.setenv(P + "POSTGRES_POOL_MIN_SIZE", "5")
    settings = load_settings()
    assert (settings.backend, settings.postgres_pool_min_size) == (backend, 5)


async def _build(use_async: bool) -> MemoryStore:
    """``build_store()`` or ``await async_build_store()``."""
    return await async_build_store() if use_async else build_store()


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("POSTGRES_SCHEMA", "bad-name", "'bad-name'"),
        ("POSTGRES_SCHEMA", "1starts_with_digit", "schema name"),
        ("POSTGRES_URL", f"not-a-url-{SECRET}", "not a database URL"),
        ("POSTGRES_URL", f"postgresql+psycopg://app:{SECRET}@db:notaport/app", "URL"),
        ("POSTGRES_URL", f"mysql://app:{SECRET}@db/app", "PostgreSQL"),
    ],
)
async def test_bad_postgres_settings_name_the_variable(
    env: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    env.setenv(P + "BACKEND", "postgres")
    env.setenv(P + "POSTGRES_URL", f"postgresql+psycopg://app:{SECRET}@127.0.0.1:1/db")
    env.setenv(P + variable, value)
    for use_async in (False, True):
        with pytest.raises(ConfigurationError) as info:
            await _build(use_async)
        text = str(info.value)
        assert P + variable + ":" in text, text
        assert expected in text
        if variable == "POSTGRES_URL" and "://" in value:
            assert SECRET not in text


def _unusable_sqlite_path(tmp_path: Path) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    return blocker / "sub" / "memory.sqlite3"  # its parent cannot be created


@pytest.mark.parametrize("variable", ["SQLITE_PATH", "FILE_DIR"])
async def test_unusable_sqlite_path_names_the_variable(
    env: pytest.MonkeyPatch, tmp_path: Path, variable: str
) -> None:
    path = _unusable_sqlite_path(tmp_path)
    env.setenv(P + "BACKEND", "sqlite")
    env.setenv(P + variable, str(path if variable == "SQLITE_PATH" else path.parent))
    for use_async in (False, True):
        with pytest.raises(ConfigurationError) as info:
            await _build(use_async)
        assert P + variable + ":" in str(info.value), str(info.value)


def test_sqlite_path_that_cannot_be_opened_names_the_variable(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    directory = tmp_path / "is-a-directory.sqlite3"
    directory.mkdir()
    env.setenv(P + "BACKEND", "sqlite")
    env.setenv(P + "SQLITE_PATH", str(directory))
    with pytest.raises(ConfigurationError) as info:
        build_store()
    assert P + "SQLITE_PATH: " in str(info.value), str(info.value)


# --------------------------------------------------------------------------- bad values, named

PG_URL = f"postgresql+psycopg://app:{SECRET}@127.0.0.1:1/db"
MONGO_URL = f"mongodb://app:{SECRET}@127.0.0.1:1/?serverSelectionTimeoutMS=300"

#: (backend, variable, bad value, text the message must hold).  ``{file}`` is an
#: existing regular file, ``{dir}`` an existing directory.
BAD_VALUES: list[tuple[str, str, str, str]] = [
    ("postgres", "POSTGRES_TIMEOUT", "inf", "finite"),
    ("postgres", "POSTGRES_TIMEOUT", "-inf", "finite"),
    ("postgres", "POSTGRES_TIMEOUT", "nan", "finite"),
    ("postgres", "POSTGRES_TIMEOUT", "1e300", "less than or equal"),
    ("postgres", "POSTGRES_TIMEOUT", "0", "greater than 0"),
    ("postgres", "POSTGRES_TIMEOUT", "-5", "greater than 0"),
    ("postgres", "POSTGRES_TIMEOUT", "soon", "number"),
    ("postgres", "POSTGRES_POOL_SIZE", "0", "greater than or equal to 1"),
    ("postgres", "POSTGRES_POOL_SIZE", "1.5", "integer"),
    ("postgres", "POSTGRES_POOL_MIN_SIZE", "-1", "greater than or equal to 0"),
    ("postgres", "POSTGRES_POOL_MIN_SIZE", "99", "must not exceed"),
    ("postgres", "POSTGRES_SCHEMA", "abc;drop", "schema name"),
    ("postgres", "POSTGRES_SCHEMA", "", "schema name"),
    ("mongodb", "MONGODB_DATABASE", "a/b", "must not contain"),
    ("mongodb", "MONGODB_DATABASE", "a.b", "must not contain"),
    ("mongodb", "MONGODB_DATABASE", "x" * 64, "shorter than 64 bytes"),
    ("mongodb", "MONGODB_COLLECTION", "$x", "'$'"),
    ("mongodb", "MONGODB_COLLECTION", "system.x", "reserved"),
    ("mongodb", "MONGODB_COLLECTION", "a..b", "'..'"),
    ("mongodb", "MONGODB_POOL_SIZE", "0", "greater than or equal to 1"),
    ("mongodb", "MONGODB_URL", f"http://app:{SECRET}@127.0.0.1:1/", "mongodb://"),
    ("file", "FILE_DIR", "{file}", "not a directory"),
    ("file", "FILE_DIR", "{file}/sub", "not a directory"),
    ("sqlite", "FILE_DIR", "{file}", "not a directory"),
    ("sqlite", "SQLITE_PATH", "{file}/memory.sqlite3", "not a directory"),
    ("sqlite", "SQLITE_PATH", "{dir}", "is a directory"),
    ("in_memory", "MAX_CONVERSATION_TOKENS", "0", "greater than or equal to 1"),
    ("in_memory", "SUMMARIZE_THRESHOLD", "-1", "greater than or equal to 0"),
    ("in_memory", "LONG_TERM_LIMIT", "0", "greater than or equal to 1"),
    ("in_memory", "EPISODIC_RETENTION_DAYS", "0", "greater than 0"),
    ("in_memory", "EPISODIC_RETENTION_DAYS", "nan", "finite number"),
    ("in_memory", "IMPORTANCE_THRESHOLD", "1.5", "less than or equal to 1"),
    ("in_memory", "AUTO_PROMOTE", "maybe", "valid boolean"),
    ("in_memory", "LONG_TERM_NAMESPACE", "", "non-empty"),
    ("in_memory", "SEARCH_LANGUAGE", "english; drop", "configuration"),
]


@pytest.mark.parametrize(
    ("backend", "variable", "value", "expected"),
    [pytest.param(*case, id=f"{case[0]}-{case[1]}={case[2][:12]}") for case in BAD_VALUES],
)
async def test_bad_value_is_a_configuration_error_naming_the_variable(
    env: pytest.MonkeyPatch,
    tmp_path: Path,
    backend: str,
    variable: str,
    value: str,
    expected: str,
) -> None:
    if backend == "mongodb":
        pytest.importorskip("pymongo")
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    a_dir = tmp_path / "a-dir"
    a_dir.mkdir()
    env.setenv(P + "BACKEND", backend)
    env.setenv(P + "POSTGRES_URL", PG_URL)
    env.setenv(P + "MONGODB_URL", MONGO_URL)
    env.setenv(P + variable, value.format(file=a_file, dir=a_dir))
    # Refused by the settings themselves, before any store (or connection) exists.
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    for use_async in (False, True):
        with pytest.raises(ConfigurationError) as built:
            await _build(use_async)
        for text in (str(info.value), str(built.value)):
            assert re.search(rf"{P}{variable}[: ]", text), text
            assert expected in text, text
            assert SECRET not in text
    assert a_file.read_text() == "not a directory"  # nothing written


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), 0.0, -1.0, 1e300])
def test_postgres_store_refuses_a_timeout_it_cannot_use(timeout: float) -> None:
    pytest.importorskip("psycopg")
    from firefly_orm.errors import EntryValidationError
    from firefly_orm.sql import PostgreSQLStore

    with pytest.raises(EntryValidationError, match="timeout"):
        PostgreSQLStore(PG_URL, timeout=timeout)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("POSTGRES_TIMEOUT", "inf"),
        ("POSTGRES_SCHEMA", "bad-name"),
        ("MONGODB_DATABASE", "a/b"),
        ("MONGODB_COLLECTION", "$x"),
    ],
)
def test_backend_specific_checks_only_apply_to_their_backend(
    env: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    env.setenv(P + variable, value)
    if variable == "POSTGRES_TIMEOUT":  # a malformed number is refused on any backend
        with pytest.raises(ConfigurationError, match=P + variable):
            load_settings()
    else:
        assert load_settings().backend == "in_memory"
