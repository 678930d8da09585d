"""A bad value from the environment fails naming its variable, never echoing a password (issue 34).

``BACKEND=mongodb MONGODB_URL=mongodb://127.0.0.1:99999/`` failed with pymongo's
"Port must be an integer between 0 and 65535" and no variable.  Now the MongoDB
URL is checked when the settings are read (hosts, ports, credentials and
options, without I/O), a connection that fails at start-up names the URL's
variable on PostgreSQL and MongoDB, and no error keeps pydantic's report
(which repeats the input) reachable through ``__context__``.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest

from firefly_orm.config import ConfigurationError, MemorySettings, build_store, load_settings
from firefly_orm.envnames import env_var
from firefly_orm.errors import DatabaseConnectionError, EntryValidationError

SECRET = "s3cretPW"


def _chain(exc: BaseException) -> str:
    """Every message reachable from ``exc`` (causes and contexts, suppressed or not)."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None:
        parts.append(f"{type(seen).__name__}: {seen!r} {seen}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A clean ``FIREFLY_AGENTIC_MEMORY_*`` environment."""
    import os

    for name in list(os.environ):
        if name.startswith("FIREFLY_AGENTIC_MEMORY_"):
            monkeypatch.delenv(name)
    return monkeypatch


BAD_MONGO_URLS = [
    f"mongodb://u:{SECRET}@127.0.0.1:99999/",  # the port
    f"mongodb://u:{SECRET}@127.0.0.1:0x1/",
    f"mongodb://u:{SECRET}@[::1/",
    f"mongodb://u:{SECRET}@h/?bogus=1",  # an option pymongo would only warn about
    f"mongodb://u:{SECRET}@h/?serverSelectionTimeoutMS=-5",  # a value it would ignore
    f"mongodb+srv://u:{SECRET}@h.example.invalid:27/",  # no port with +srv (no DNS asked)
    "mongodb://:@/",
]


@pytest.mark.parametrize("url", BAD_MONGO_URLS)
def test_a_bad_mongodb_url_names_its_variable(env: pytest.MonkeyPatch, url: str) -> None:
    pytest.importorskip("beanie")
    env.setenv(env_var("backend"), "mongodb")
    env.setenv(env_var("mongodb_url"), url)
    with pytest.raises(ConfigurationError, match=env_var("mongodb_url")) as info:
        build_store()
    assert SECRET not in _chain(info.value)
    assert "not a usable MongoDB URL" in str(info.value)


def test_the_url_is_checked_only_for_its_backend(env: pytest.MonkeyPatch) -> None:
    env.setenv(env_var("backend"), "in_memory")
    env.setenv(env_var("mongodb_url"), "mongodb://127.0.0.1:99999/")
    assert load_settings().backend == "in_memory"


def test_the_store_refuses_a_malformed_url_but_leaves_options_to_the_client() -> None:
    pytest.importorskip("beanie")
    from firefly_orm.mongo import MongoDBStore

    with pytest.raises(EntryValidationError) as info:
        MongoDBStore(f"mongodb://u:{SECRET}@127.0.0.1:99999/")
    assert info.value.field == "url"
    assert SECRET not in _chain(info.value)
    # An unknown option is the client's warning (as before), not the constructor's error.
    MongoDBStore(f"mongodb://u:{SECRET}@127.0.0.1/?bogus=1")


def test_an_unreachable_mongodb_names_its_variable(env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("beanie")
    env.setenv(env_var("backend"), "mongodb")
    env.setenv(
        env_var("mongodb_url"),
        f"mongodb://u:{SECRET}@127.0.0.1:1/?serverSelectionTimeoutMS=100&connectTimeoutMS=100",
    )
    with pytest.raises(DatabaseConnectionError, match=env_var("mongodb_url")) as info:
        build_store()
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("port", ["99999", "1"])
def test_a_bad_postgres_port_names_its_variable(env: pytest.MonkeyPatch, port: str) -> None:
    pytest.importorskip("psycopg")
    env.setenv(env_var("backend"), "postgres")
    env.setenv(env_var("postgres_url"), f"postgresql+psycopg://u:{SECRET}@127.0.0.1:{port}/x")
    env.setenv(env_var("postgres_timeout"), "1")
    with pytest.raises(DatabaseConnectionError, match=env_var("postgres_url")) as info:
        build_store()
    assert SECRET not in str(info.value)


def _typed_fields() -> list[str]:
    """The settings fields holding numbers or flags (every one must refuse garbage)."""
    found = []
    for name, field in MemorySettings.model_fields.items():
        kinds = set(typing.get_args(field.annotation)) or {field.annotation}
        if kinds & {int, float, bool}:
            found.append(name)
    return found


@pytest.mark.parametrize("field", _typed_fields())
def test_every_number_or_flag_names_its_variable(env: pytest.MonkeyPatch, field: str) -> None:
    env.setenv(env_var(field), "not-a-value")
    with pytest.raises(ConfigurationError, match=env_var(field)) as info:
        load_settings()
    assert info.value.__context__ is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("backend", "mongo"),
        ("postgres_timeout", "inf"),
        ("importance_threshold", "2"),
        ("search_language", "no such language!"),
    ],
)
def test_other_bad_values_name_their_variable(
    env: pytest.MonkeyPatch, field: str, value: Any
) -> None:
    env.setenv(env_var(field), value)
    with pytest.raises(ConfigurationError, match=env_var(field)):
        load_settings()


# --------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "postgres_url",
            f"postgresql+psycopg://u:{SECRET}@127.0.0.1:99999/x",
            "DatabaseConnectionError: FIREFLY_AGENTIC_MEMORY_POSTGRES_URL: ",
        ),
        (
            "postgres_url",
            f"nonsense://u:{SECRET}@h/x",
            "FIREFLY_AGENTIC_MEMORY_POSTGRES_URL: unsupported database",
        ),
        (
            "sqlite_path",
            "/nonexistent-dir-of-firefly/x.db",
            "FIREFLY_AGENTIC_MEMORY_SQLITE_PATH: no such database file",
        ),
    ],
)
def test_the_cli_names_the_variable_its_database_came_from(
    env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    expected: str,
) -> None:
    pytest.importorskip("psycopg")
    from firefly_orm.cli import main

    env.setenv(env_var(variable), value)
    assert main(["current", "--timeout", "1"]) != 0
    err = capsys.readouterr().err
    assert expected in err
    assert SECRET not in err


def test_the_cli_names_no_variable_for_an_explicit_url(
    env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("psycopg")
    from firefly_orm.cli import main

    env.setenv(env_var("postgres_url"), "postgresql+psycopg://u@127.0.0.1:5/unused")
    url = f"postgresql+psycopg://u:{SECRET}@127.0.0.1:99999/x"
    assert main(["current", "--url", url, "--timeout", "1"]) != 0
    err = capsys.readouterr().err
    assert "DatabaseConnectionError: " in err
    assert "FIREFLY_AGENTIC_MEMORY" not in err and SECRET not in err


def test_the_cli_names_a_bad_schema_variable(
    env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("psycopg")
    from firefly_orm.cli import main

    env.setenv(env_var("postgres_schema"), 'Bad"Name;')
    url = "postgresql+psycopg://u@127.0.0.1:99999/x"
    assert main(["current", "--url", url]) == 2  # refused before any connection
    assert "FIREFLY_AGENTIC_MEMORY_POSTGRES_SCHEMA: " in capsys.readouterr().err
