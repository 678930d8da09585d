"""Secrets in every URL form never reach a message, a repr or the CLI's output.

A table of URL forms (userinfo password, ``?password=`` query parameter in any
case and position, both at once, URL-quoted values, multi-host MongoDB URLs)
crossed with every surface that renders a URL or a driver's message: the
:mod:`firefly_orm.errors` helpers, ``repr`` of the stores, the connection error
of a refused server (sync and async), ``build_store`` / ``async_build_store``,
:func:`firefly_orm.migrate.current` and the ``firefly-orm`` CLI.  Port 1 on
127.0.0.1 refuses connections, so no server is needed.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from firefly_orm import cli, migrate
from firefly_orm.config import async_build_store, build_store
from firefly_orm.errors import FireflyOrmError, redact_url, scrub_secret, url_secrets

P = "FIREFLY_AGENTIC_MEMORY_"
USER_PW = "Us3rPw!x"
QUERY_PW = "S3cret@q&z"  # '@' and '&' must be URL-quoted inside a URL
Q = quote(QUERY_PW, safe="")
QP = quote_plus(QUERY_PW, safe="")

PG = "postgresql+psycopg://u{userinfo}@127.0.0.1:1/x{query}"
#: (id, PostgreSQL URL, the secrets it holds)
PG_URLS: list[tuple[str, str, tuple[str, ...]]] = [
    ("userinfo", PG.format(userinfo=f":{quote(USER_PW)}", query=""), (USER_PW,)),
    ("query", PG.format(userinfo="", query=f"?password={Q}"), (QUERY_PW,)),
    ("query-plus-quoted", PG.format(userinfo="", query=f"?password={QP}"), (QUERY_PW,)),
    ("query-upper-key", PG.format(userinfo="", query=f"?PASSWORD={Q}"), (QUERY_PW,)),
    (
        "query-second-param",
        PG.format(userinfo="", query=f"?sslmode=disable&password={Q}"),
        (QUERY_PW,),
    ),
    ("sslpassword", PG.format(userinfo="", query=f"?sslpassword={Q}"), (QUERY_PW,)),
    (
        "both",
        PG.format(userinfo=f":{quote(USER_PW)}", query=f"?password={Q}"),
        (USER_PW, QUERY_PW),
    ),
]

MONGO_OPTS = "serverSelectionTimeoutMS=300&connectTimeoutMS=300"
#: (id, MongoDB URL, the secrets it holds)
MONGO_URLS: list[tuple[str, str, tuple[str, ...]]] = [
    ("userinfo", f"mongodb://u:{quote(USER_PW)}@127.0.0.1:1/?{MONGO_OPTS}", (USER_PW,)),
    (
        "multi-host-userinfo",
        f"mongodb://u:{quote(USER_PW)}@127.0.0.1:1,127.0.0.1:2/?{MONGO_OPTS}",
        (USER_PW,),
    ),
    ("query", f"mongodb://127.0.0.1:1/?{MONGO_OPTS}&password={Q}", (QUERY_PW,)),
    (
        "multi-host-both",
        f"mongodb://u:{quote(USER_PW)}@127.0.0.1:1,127.0.0.1:2/db?password={Q}&{MONGO_OPTS}",
        (USER_PW, QUERY_PW),
    ),
    (
        "semicolon-upper-key",
        f"mongodb://u:{quote(USER_PW)}@127.0.0.1:1/?{MONGO_OPTS.replace('&', ';')};Password={Q}",
        (USER_PW, QUERY_PW),
    ),
]
#: Never contacted (DNS): only the text surfaces.
SRV_URLS: list[tuple[str, str, tuple[str, ...]]] = [
    (
        "srv-both",
        f"mongodb+srv://u:{quote(USER_PW)}@c1.example.invalid,c2.example.invalid/db?password={Q}",
        (USER_PW, QUERY_PW),
    ),
    ("srv-query", f"mongodb+srv://c.example.invalid/?PassWord={QP}", (QUERY_PW,)),
]
ALL_URLS = PG_URLS + MONGO_URLS + SRV_URLS


def _params(table: list[tuple[str, str, tuple[str, ...]]]) -> list[Any]:
    return [pytest.param(url, secrets, id=name) for name, url, secrets in table]


def assert_no_secret(text: str, secrets: tuple[str, ...]) -> None:
    """No secret (plain or in any URL-quoted form) appears in ``text``."""
    for secret in secrets:
        for form in {secret, quote(secret, safe=""), quote_plus(secret, safe=""), quote(secret)}:
            assert form not in text, f"{form!r} leaked in {text!r}"


def _messages(exc: BaseException) -> str:
    """The message of ``exc`` and of every exception chained to it."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return "\n".join(parts)


# --------------------------------------------------------------------------- errors helpers


@pytest.mark.parametrize(("url", "secrets"), _params(ALL_URLS))
def test_redact_url_hides_every_secret(url: str, secrets: tuple[str, ...]) -> None:
    rendered = redact_url(url)
    assert_no_secret(rendered, secrets)
    assert "***" in rendered
    assert "127.0.0.1" in rendered or "example.invalid" in rendered


@pytest.mark.parametrize(("url", "secrets"), _params(ALL_URLS))
def test_url_secrets_finds_every_secret(url: str, secrets: tuple[str, ...]) -> None:
    assert set(secrets) <= set(url_secrets(url))
    message = f"failed for {url}: {' and '.join(secrets)}"
    assert_no_secret(scrub_secret(message, url_secrets(url)), secrets)


def test_redact_url_keeps_other_parameters_and_hides_secret_ones() -> None:
    url = "postgresql://u@db/x?sslmode=require&password=pw1&application_name=app"
    assert redact_url(url) == (
        "postgresql://u@db/x?application_name=app&password=***&sslmode=require"
    )
    multi = "mongodb://u:pw0@h1:1,h2:2/db?replicaSet=rs&password=pw1#frag"
    assert redact_url(multi) == "mongodb://u:***@h1:1,h2:2/db?replicaSet=rs&password=***#frag"


def test_url_secrets_of_urls_without_secrets_is_empty() -> None:
    for url in (None, "sqlite:///x.db", "postgresql://u@db/x?sslmode=require", "not a url"):
        assert url_secrets(url) == ()


# --------------------------------------------------------------------------- stores


@pytest.mark.parametrize(("url", "secrets"), _params(PG_URLS))
def test_postgres_repr_and_refused_connection_hide_secrets(
    url: str, secrets: tuple[str, ...]
) -> None:
    pytest.importorskip("psycopg")
    from firefly_orm.sql import PostgreSQLStore

    store = PostgreSQLStore(url, timeout=2, pool_min_size=0)
    try:
        assert_no_secret(repr(store), secrets)
        with pytest.raises(FireflyOrmError) as info:
            store.initialize()
        assert "127.0.0.1" in str(info.value)
        assert_no_secret(str(info.value), secrets)
    finally:
        store.close()


@pytest.mark.parametrize(("url", "secrets"), _params(PG_URLS))
async def test_postgres_async_refused_connection_hides_secrets(
    url: str, secrets: tuple[str, ...]
) -> None:
    pytest.importorskip("psycopg")
    from firefly_orm.sql import PostgreSQLStore

    store = PostgreSQLStore(url, timeout=2, pool_min_size=0)
    try:
        with pytest.raises(FireflyOrmError) as info:
            await store.async_initialize()
        assert_no_secret(str(info.value), secrets)
    finally:
        await store.async_close()


def test_sqlalchemy_store_repr_hides_a_query_password(tmp_path: Any) -> None:
    from firefly_orm.sql import SQLAlchemyStore

    store = SQLAlchemyStore(f"sqlite:///{tmp_path}/m.db?password={Q}")
    try:
        assert_no_secret(repr(store), (QUERY_PW,))
    finally:
        store.close()


@pytest.mark.parametrize(("url", "secrets"), _params(MONGO_URLS + SRV_URLS))
def test_mongodb_repr_hides_secrets(url: str, secrets: tuple[str, ...]) -> None:
    pytest.importorskip("pymongo")
    from firefly_orm.errors import EntryValidationError
    from firefly_orm.mongo import MongoDBStore

    try:
        store = MongoDBStore(url)
    except EntryValidationError as exc:  # a malformed URL (two +srv hosts) is refused at once
        assert_no_secret(str(exc), secrets)
        return
    assert_no_secret(repr(store), secrets)


@pytest.mark.filterwarnings("ignore::UserWarning")  # pymongo: "Unknown option password"
@pytest.mark.parametrize(("url", "secrets"), _params(MONGO_URLS))
def test_mongodb_refused_connection_hides_secrets(url: str, secrets: tuple[str, ...]) -> None:
    pytest.importorskip("pymongo")
    from firefly_orm.mongo import MongoDBStore

    store = MongoDBStore(url)
    try:
        with pytest.raises(FireflyOrmError) as info:
            store.initialize()
        assert_no_secret(_messages(info.value), secrets)
    finally:
        store.close()


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("url", "secrets"), _params(MONGO_URLS[-1:]))
async def test_mongodb_async_refused_connection_hides_secrets(
    url: str, secrets: tuple[str, ...]
) -> None:
    pytest.importorskip("pymongo")
    from firefly_orm.mongo import MongoDBStore

    store = MongoDBStore(url)
    try:
        with pytest.raises(FireflyOrmError) as info:
            await store.async_initialize()
        assert_no_secret(_messages(info.value), secrets)
    finally:
        await store.async_close()


# --------------------------------------------------------------------------- from config


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("url", "secrets"), _params(PG_URLS + MONGO_URLS))
async def test_build_store_errors_hide_secrets(
    env: pytest.MonkeyPatch, url: str, secrets: tuple[str, ...]
) -> None:
    backend = "postgres" if url.startswith("postgresql") else "mongodb"
    pytest.importorskip("psycopg" if backend == "postgres" else "pymongo")
    env.setenv(P + "BACKEND", backend)
    env.setenv(P + ("POSTGRES_URL" if backend == "postgres" else "MONGODB_URL"), url)
    env.setenv(P + "POSTGRES_TIMEOUT", "2")
    with pytest.raises(FireflyOrmError) as info:
        build_store()
    assert_no_secret(_messages(info.value), secrets)
    with pytest.raises(FireflyOrmError) as ainfo:
        await async_build_store()
    assert_no_secret(_messages(ainfo.value), secrets)


@pytest.mark.parametrize(("url", "secrets"), _params(PG_URLS))
def test_bad_postgres_settings_hide_secrets(
    env: pytest.MonkeyPatch, url: str, secrets: tuple[str, ...]
) -> None:
    env.setenv(P + "BACKEND", "postgres")
    env.setenv(P + "POSTGRES_URL", url.replace("postgresql+psycopg", "mysql"))
    with pytest.raises(FireflyOrmError) as info:
        build_store()
    assert_no_secret(_messages(info.value), secrets)


# --------------------------------------------------------------------------- migrate and CLI


@pytest.mark.parametrize(("url", "secrets"), _params(PG_URLS))
def test_migrate_current_hides_secrets(url: str, secrets: tuple[str, ...]) -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(FireflyOrmError) as info:
        migrate.current(url)
    assert "127.0.0.1" in str(info.value)
    assert_no_secret(_messages(info.value), secrets)


@pytest.mark.parametrize("command", [["current"], ["check"], ["stats"], ["export", "--all"]])
@pytest.mark.parametrize(("url", "secrets"), _params(PG_URLS))
def test_cli_hides_secrets(
    capsys: pytest.CaptureFixture[str],
    env: pytest.MonkeyPatch,
    command: list[str],
    url: str,
    secrets: tuple[str, ...],
) -> None:
    pytest.importorskip("psycopg")
    status = cli.main([*command, "--url", url, "--timeout", "2"])
    out, err = capsys.readouterr()
    assert status != 0
    assert "127.0.0.1" in err
    assert_no_secret(out + err, secrets)
