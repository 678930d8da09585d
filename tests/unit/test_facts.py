"""One home per fact: secret scrubbing (``errors``) and environment names (``envnames``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from firefly_orm import cli, config, envnames, migrate, summarization
from firefly_orm.config import MemorySettings
from firefly_orm.errors import redact_url, scrub_secret, url_password

# --------------------------------------------------------------------------- secrets


def test_scrub_secret_hides_every_occurrence_plain_and_url_quoted() -> None:
    text = "auth p@ss:w/rd failed for postgresql://app:p%40ss%3Aw%2Frd@db/app (p@ss:w/rd)"
    scrubbed = scrub_secret(text, "p@ss:w/rd")
    assert scrubbed == "auth *** failed for postgresql://app:***@db/app (***)"


def test_scrub_secret_hides_the_plus_quoted_form() -> None:
    assert scrub_secret("pw=a+b%21 or a b!", "a b!") == "pw=*** or ***"


@pytest.mark.parametrize("secret", [None, ""])
def test_scrub_secret_without_a_secret_leaves_the_text(secret: str | None) -> None:
    assert scrub_secret("nothing to hide", secret) == "nothing to hide"


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("postgresql+psycopg://app:s%40cret@db:5432/app", "s@cret"),
        ("mongodb://user:pw@h1:27017,h2:27017/db?replicaSet=rs", "pw"),
        ("mongodb+srv://user:pw@cluster.example.net/db", "pw"),
        ("postgresql://app@db/app", None),
        ("sqlite:///memory.sqlite3", None),
        ("not a url", None),
    ],
)
def test_url_password(url: str, password: str | None) -> None:
    assert url_password(url) == password


def test_url_password_of_none_is_none() -> None:
    assert url_password(None) is None


def test_redact_url_and_scrub_secret_agree() -> None:
    url = "postgresql://app:s3cr3t@db/app"
    message = f"could not connect to {url}: password s3cr3t rejected"
    scrubbed = scrub_secret(message, url_password(url))
    assert "s3cr3t" not in scrubbed
    assert "s3cr3t" not in redact_url(url)


# --------------------------------------------------------------------------- environment names


def test_every_env_constant_names_a_settings_field() -> None:
    fields = set(MemorySettings.model_fields)
    constants = {
        name: value
        for name, value in vars(envnames).items()
        if name.startswith("ENV_") and name != "ENV_PREFIX"
    }
    assert constants, "envnames defines no variable names"
    for name, value in constants.items():
        field = value.removeprefix(envnames.ENV_PREFIX).lower()
        assert field in fields, f"{name}={value!r} is not a MemorySettings field"
        assert value == envnames.env_var(field)


def test_settings_read_the_same_prefix() -> None:
    assert MemorySettings.model_config.get("env_prefix") == envnames.ENV_PREFIX


def test_the_old_constant_names_are_the_one_home_s_values() -> None:
    assert config.ENV_PREFIX is envnames.ENV_PREFIX
    assert config.env_var is envnames.env_var
    assert cli.ENV_POSTGRES_URL is envnames.ENV_POSTGRES_URL
    assert cli.ENV_SQLITE_PATH is envnames.ENV_SQLITE_PATH
    assert cli.ENV_POSTGRES_SCHEMA is envnames.ENV_POSTGRES_SCHEMA
    assert summarization.SUMMARY_MODEL_ENV is envnames.ENV_SUMMARY_MODEL
    assert envnames.ENV_POSTGRES_URL == "FIREFLY_AGENTIC_MEMORY_POSTGRES_URL"
    assert envnames.ENV_SQLITE_PATH == "FIREFLY_AGENTIC_MEMORY_SQLITE_PATH"
    assert envnames.ENV_POSTGRES_SCHEMA == "FIREFLY_AGENTIC_MEMORY_POSTGRES_SCHEMA"
    assert envnames.ENV_SUMMARY_MODEL == "FIREFLY_AGENTIC_MEMORY_SUMMARY_MODEL"


def test_database_url_from_env_prefers_postgres_then_sqlite(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(envnames.ENV_POSTGRES_URL, raising=False)
    monkeypatch.delenv(envnames.ENV_SQLITE_PATH, raising=False)
    assert envnames.database_url_from_env() is None
    monkeypatch.setenv(envnames.ENV_SQLITE_PATH, "/tmp/m.sqlite3")
    assert envnames.database_url_from_env() == "sqlite:////tmp/m.sqlite3"
    monkeypatch.setenv(envnames.ENV_POSTGRES_URL, "")
    assert envnames.database_url_from_env() == "sqlite:////tmp/m.sqlite3"
    monkeypatch.setenv(envnames.ENV_POSTGRES_URL, "postgresql://app@db/app")
    assert envnames.database_url_from_env() == "postgresql://app@db/app"


def test_alembic_environment_without_a_url_names_both_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(envnames.ENV_POSTGRES_URL, raising=False)
    monkeypatch.delenv(envnames.ENV_SQLITE_PATH, raising=False)

    context = SimpleNamespace(
        config=SimpleNamespace(attributes={}, get_main_option=lambda name: None),
        get_x_argument=lambda as_dictionary: {},
        is_offline_mode=lambda: False,
    )
    with pytest.raises(RuntimeError) as caught:
        migrate.run_environment(context)
    assert envnames.ENV_POSTGRES_URL in str(caught.value)
    assert envnames.ENV_SQLITE_PATH in str(caught.value)
