"""Secrets in every URL form, through the surfaces that need a process or a live server.

``tests/unit/test_url_secrets.py`` covers the redaction helpers, reprs and
in-process refused connections.  Here, a table of URL forms (userinfo password
needing percent-encoding, ``?password=`` plain and ``+``-quoted, upper-case key,
``sslpassword``, all at once; ``postgres://``, ``postgresql://``,
``postgresql+psycopg://``; ``mongodb://`` and ``mongodb+srv://``) goes through:

* the ``firefly-orm`` CLI, every command, verbose logging on, against a closed
  port (``--url`` and the environment variable) and against a live server (the
  main PostgreSQL, trust auth: the password is accepted and ignored, so every
  command really runs): in this process (``cli_runner.run_cli``: the exit
  status, stdout and stderr of the installed script, tracebacks, warnings and
  last-resort log records included), and the installed script in a child
  process for the full form's ``migrate`` (what only a process prints, at exit);
* a live store's whole life with logging captured at DEBUG (all loggers, with
  tracebacks), ``repr``/``str``, and errors from a live server (a database that
  does not exist, MongoDB authentication refused);
* ``migrate.upgrade``/``downgrade``/``stamp``/``check``/``require_head`` errors;
* ``MemoryManager.from_config`` / ``async_from_config`` errors from the environment.

Each test prints surfaces x URL forms checked and leaks, and fails on any leak
(a secret in plain, URL-quoted or ``+``-quoted form, or a 4+ character piece of it).
"""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from cli_runner import run_cli as run_in_process
from cli_runner import run_installed

from firefly_orm.testing._secantus import free_port

#: Needs percent-encoding in a userinfo ('@', '/', '%').
USER_PW = "uS3rQ@pw/%x"
#: Needs quoting in a query ('&', '=', ';', ' ').
QUERY_PW = "qS3cK&r=t;z y"
SSL_PW = "sslPwK!9Z"
ENV = "FIREFLY_AGENTIC_MEMORY_"
MONGO_OPTS = "serverSelectionTimeoutMS=400&connectTimeoutMS=400"


@dataclass(frozen=True)
class Form:
    """One URL form: a template with ``{host}``, ``{port}`` and ``{db}``, and its secrets."""

    name: str
    template: str
    secrets: tuple[str, ...]

    def url(self, host: str = "127.0.0.1", port: int = 1, db: str = "x") -> str:
        return self.template.format(host=host, port=port, db=db)


U, Q, QP, S = quote(USER_PW, safe=""), quote(QUERY_PW, safe=""), quote_plus(QUERY_PW), SSL_PW
PG_FORMS = [
    Form("userinfo", f"postgresql+psycopg://u:{U}@{{host}}:{{port}}/{{db}}", (USER_PW,)),
    Form("query", f"postgresql+psycopg://u@{{host}}:{{port}}/{{db}}?password={Q}", (QUERY_PW,)),
    Form(
        "query-plus-quoted",
        f"postgresql://u@{{host}}:{{port}}/{{db}}?sslmode=disable&password={QP}",
        (QUERY_PW,),
    ),
    # libpq refuses the upper-case key ("invalid connection option"): error paths only.
    Form("query-upper-key", f"postgresql://u@{{host}}:{{port}}/{{db}}?PASSWORD={Q}", (QUERY_PW,)),
    Form(
        "postgres-scheme-all",
        f"postgres://u:{U}@{{host}}:{{port}}/{{db}}?password={Q}&sslpassword={S}",
        (USER_PW, QUERY_PW, SSL_PW),
    ),
]
#: The form every CLI command is run with (the others run two commands each).
FULL = PG_FORMS[-1]
#: The forms a live server accepts.
LIVE_FORMS = [f for f in PG_FORMS if f.name != "query-upper-key"]
MONGO_FORMS = [
    Form("mongo-userinfo", f"mongodb://u:{U}@{{host}}:{{port}}/?{MONGO_OPTS}", (USER_PW,)),
    Form(
        "mongo-query-and-userinfo",
        f"mongodb://u:{U}@{{host}}:{{port}}/{{db}}?password={Q}&{MONGO_OPTS}",
        (USER_PW, QUERY_PW),
    ),
]
SRV_FORM = Form(
    "mongo-srv",
    f"mongodb+srv://u:{U}@c1.example.invalid/db?password={QP}&{MONGO_OPTS}",
    (USER_PW, QUERY_PW),
)


def leaks_in(text: str, secrets: tuple[str, ...]) -> list[str]:
    """The forms of ``secrets`` found in ``text`` (plain, quoted, or a 4+ character piece)."""
    found: set[str] = set()
    for secret in secrets:
        forms = {secret, quote(secret, safe=""), quote_plus(secret, safe=""), quote(secret)}
        forms |= {p for p in re.split(r"[^A-Za-z0-9]+", secret) if len(p) >= 4}
        found |= {form for form in forms if form in text}
    return sorted(found)


@dataclass
class Leaks:
    """Surfaces x URL forms checked, and what leaked where."""

    title: str
    checked: int = 0
    leaked: list[str] = field(default_factory=list)

    def check(self, surface: str, form: Form, text: str) -> None:
        self.checked += 1
        found = leaks_in(text, form.secrets)
        if found:
            self.leaked.append(f"{surface} / {form.name}: {found} in {text[-600:]!r}")

    def report(self) -> None:
        print(f"\n[secrets / {self.title}] checked={self.checked} leaks={len(self.leaked)}")
        assert not self.leaked, "\n".join(self.leaked[:10])


def _messages(exc: BaseException) -> str:
    """The messages of ``exc`` and of every exception chained to it."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def _outcome(call: Callable[[], Any]) -> str:
    """What ``call()`` returned or raised (with the chain), as text."""
    try:
        return repr(call())
    except Exception as exc:
        return _messages(exc)


def test_the_detector_sees_every_secret_of_every_form() -> None:
    """The leak check itself: each form's URL shows each of its secrets (so 0 leaks means
    something)."""
    for form in [*PG_FORMS, *MONGO_FORMS, SRV_FORM]:
        for secret in form.secrets:
            assert leaks_in(form.url(), (secret,)), (form.name, secret)
        assert leaks_in(f"password {form.secrets[0]}!", form.secrets)


# --------------------------------------------------------------------------- the CLI


def run_cli(
    args: list[str], cwd: Path, *, process: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    """``firefly-orm ARGS`` (no ``FIREFLY_AGENTIC_*`` variables but ``env``): its exit
    status, stdout and stderr; in this process, or the installed script when ``process``."""
    run = run_installed if process else run_in_process
    return run(*args, env=env, cwd=cwd)


def _export_file(tmp_path: Path) -> Path:
    path = tmp_path / "export.json"
    path.write_text(
        '{"conversation_id": "c1", "turns": [{"turn_id": 0, "user_prompt": "p", '
        '"assistant_response": "r"}], "summary": null}',
        encoding="utf-8",
    )
    return path


#: Every command, with its arguments (the import file is added by the test).
COMMANDS: list[list[str]] = [
    ["migrate"],
    ["current"],
    ["check"],
    ["history"],
    ["stats", "--json"],
    ["cleanup-expired"],
    ["export", "--all"],
    ["import", "{file}"],
    ["stamp", "head"],
    ["downgrade", "base"],
]


def _command(command: list[str], file: Path) -> list[str]:
    return [part.replace("{file}", str(file)) for part in command]


def test_cli_in_a_subprocess_hides_secrets(tmp_path: Path) -> None:
    """Refused connections: every command with the full form, two with each other form,
    the URL given as ``--url`` and as the environment variable; plus MongoDB URLs
    (which the CLI refuses by name).  The full form's ``migrate`` (both ways) runs the
    installed script in a child process, the others run in this process, one at a time."""
    leaks = Leaks("CLI subprocess, refused connection")
    port = free_port()
    file = _export_file(tmp_path)
    runs: list[tuple[str, Form, list[str], dict[str, str]]] = []
    for form in PG_FORMS:
        commands = COMMANDS if form is FULL else [["migrate"], ["current"]]
        url = form.url(port=port)
        for command in commands:
            args = ["-v", *_command(command, file), "--timeout", "1"]
            runs.append((f"cli {command[0]} --url", form, [*args, "--url", url], {}))
            if form is FULL:
                env = {ENV + "POSTGRES_URL": url}
                runs.append((f"cli {command[0]} (env)", form, args, env))
    for form in [*MONGO_FORMS, SRV_FORM]:
        runs.append(("cli current (mongodb)", form, ["current", "--url", form.url(port=port)], {}))

    def one(run: tuple[str, Form, list[str], dict[str, str]]) -> tuple[str, Form, str, int]:
        surface, form, args, env = run
        process = form is FULL and args[1] == "migrate"
        done = run_cli(args, tmp_path, process=process, **env)
        return (
            surface + (" [process]" if process else ""),
            form,
            done.stdout + done.stderr,
            done.returncode,
        )

    results = [one(run) for run in runs]
    for surface, form, text, status in results:
        leaks.check(surface, form, text)
        if not surface.startswith("cli history"):  # the only command that needs no database
            assert status != 0, f"{surface} / {form.name} worked against a closed port: {text}"
        assert "Traceback" not in text, f"{surface} / {form.name}: {text}"
    leaks.report()


@pytest.mark.postgres
def test_cli_on_a_live_server_hides_secrets(
    tmp_path: Path, postgres_url: str, postgres_admin_engine: Any
) -> None:
    """Every command succeeds on the main server (trust auth ignores the passwords)."""
    import sqlalchemy as sa
    from dbutil import drop_schema

    live = sa.engine.make_url(postgres_url)
    if live.password:
        pytest.skip("the test server needs a password; this test puts its own in the URL")
    leaks = Leaks("CLI subprocess, live server")
    schema = "t_" + uuid.uuid4().hex[:10]
    file = _export_file(tmp_path)
    form = Form(
        "postgres-scheme-all-live",
        f"postgresql://{live.username}:{U}@{{host}}:{{port}}/{{db}}?sslpassword={S}",
        (USER_PW, SSL_PW),
    )
    url = form.url(host=str(live.host), port=live.port or 5432, db=str(live.database))
    base = ["-v", "--url", url, "--schema", schema]

    def one(command: list[str]) -> tuple[list[str], subprocess.CompletedProcess[str]]:
        return command, run_cli([*_command(command, file), *base], tmp_path)

    try:
        ordered = [one(command) for command in COMMANDS]
    finally:
        drop_schema(postgres_admin_engine, schema)
    for command, done in ordered:
        text = done.stdout + done.stderr
        leaks.check(f"cli {command[0]} (live)", form, text)
        assert done.returncode == 0, f"{command}: exit {done.returncode}: {text}"
    leaks.report()


# --------------------------------------------------------------------------- live stores, logs


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every logger's records at DEBUG, tracebacks included in ``caplog.text``."""
    caplog.set_level(logging.DEBUG)
    yield caplog


@pytest.mark.postgres
def test_live_postgres_store_logs_reprs_and_errors_hide_secrets(
    all_logs: pytest.LogCaptureFixture, postgres_url: str, postgres_admin_engine: Any
) -> None:
    import sqlalchemy as sa
    from dbutil import drop_schema

    from firefly_orm import MemoryEntry, MemoryManager
    from firefly_orm.sql import PostgreSQLStore

    live = sa.engine.make_url(postgres_url)
    if live.password:
        pytest.skip("the test server needs a password; this test puts its own in the URL")
    leaks = Leaks("live PostgreSQL store: logs, repr, errors")
    host, port, db = str(live.host), live.port or 5432, str(live.database)
    user = str(live.username)
    forms = [Form(f.name, f.template.replace("//u", f"//{user}", 1), f.secrets) for f in LIVE_FORMS]
    for form in forms:
        schema = "t_" + uuid.uuid4().hex[:10]
        store = PostgreSQLStore(form.url(host, port, db), schema_name=schema, timeout=5)
        surfaces: dict[str, str] = {"repr": repr(store), "str": str(store)}
        try:
            store.initialize()
            store.save("notes", MemoryEntry(key="k", content={"v": 1}))
            surfaces["load"] = repr(store.load("notes"))
            manager = MemoryManager(store=store, max_conversation_tokens=10, summarize_threshold=0)
            for n in range(4):
                manager.add_turn("c", f"prompt {n}", "a longer answer " * 3)
            surfaces["manager repr"] = repr(manager)
            surfaces["analyze"] = _outcome(store.analyze)
            surfaces["async life"] = _outcome(partial(asyncio.run, _async_life(store)))
        finally:
            store.close()
            drop_schema(postgres_admin_engine, schema)
        surfaces["DEBUG logs of the store's life"] = all_logs.text
        all_logs.clear()
        # A live server's own refusal: a database that does not exist.
        missing = PostgreSQLStore(form.url(host, port, "no_such_db_" + uuid.uuid4().hex[:6]))
        surfaces["missing database"] = _outcome(missing.initialize)
        surfaces["missing database (async)"] = _outcome(
            partial(asyncio.run, missing.async_initialize())
        )
        missing.close()
        surfaces["DEBUG logs of the refusals"] = all_logs.text
        all_logs.clear()
        assert "does not exist" in surfaces["missing database"], surfaces["missing database"]
        for surface, text in surfaces.items():
            leaks.check(surface, form, text)
    leaks.report()


async def _async_life(store: Any) -> str:
    from firefly_orm import MemoryEntry

    await store.async_save("notes", MemoryEntry(key="k2", content=2))
    loaded = await store.async_load("notes")
    await store.async_close()
    return repr(loaded)


@pytest.mark.mongo
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_live_mongo_store_logs_warnings_and_errors_hide_secrets(
    all_logs: pytest.LogCaptureFixture, mongo_url: str
) -> None:
    """A live server that refuses the credentials (or ignores them), warnings recorded."""
    from pymongo.uri_parser import parse_uri

    from firefly_orm import MemoryEntry
    from firefly_orm.mongo import MongoDBStore

    leaks = Leaks("live MongoDB store: logs, warnings, errors")
    host, port = parse_uri(mongo_url)["nodelist"][0]
    for form in [*MONGO_FORMS, SRV_FORM]:
        url = form.url(host=host, port=port, db="x")
        database = "t_" + uuid.uuid4().hex[:10]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            store = MongoDBStore(url, database=database)
            surfaces = {"repr": repr(store), "str": str(store)}
            surfaces["initialize"] = _outcome(store.initialize)
            surfaces["save"] = _outcome(partial(store.save, "n", MemoryEntry(content=1)))
            surfaces["close"] = _outcome(store.close)
        surfaces["warnings"] = "\n".join(str(w.message) for w in caught)
        surfaces["DEBUG logs"] = all_logs.text
        all_logs.clear()
        for surface, text in surfaces.items():
            leaks.check(surface, form, text)
    leaks.report()


# --------------------------------------------------------------------------- migrate, config


def test_migrate_and_config_errors_hide_secrets(
    env: pytest.MonkeyPatch, all_logs: pytest.LogCaptureFixture
) -> None:
    from firefly_orm import MemoryManager, migrate

    leaks = Leaks("migrate.* and from_config errors, refused connection")
    port = free_port()
    for form in PG_FORMS:
        url = form.url(port=port)
        calls: dict[str, Callable[[], Any]] = {
            "migrate.upgrade": partial(migrate.upgrade, url, schema_name="s"),
            "migrate.downgrade": partial(migrate.downgrade, url, "base", schema_name="s"),
            "migrate.stamp": partial(migrate.stamp, url, schema_name="s"),
            "migrate.check": partial(migrate.check, url, schema_name="s"),
            "migrate.require_head": partial(migrate.require_head, url, schema_name="s"),
        }
        env.setenv(ENV + "BACKEND", "postgres")
        env.setenv(ENV + "POSTGRES_URL", url)
        env.setenv(ENV + "POSTGRES_TIMEOUT", "1")
        calls["MemoryManager.from_config"] = MemoryManager.from_config
        calls["MemoryManager.async_from_config"] = lambda: asyncio.run(
            MemoryManager.async_from_config()
        )
        for surface, call in calls.items():
            leaks.check(surface, form, _outcome(call) + all_logs.text)
            all_logs.clear()
    for form in MONGO_FORMS:
        env.setenv(ENV + "BACKEND", "mongodb")
        env.setenv(ENV + "MONGODB_URL", form.url(port=port))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            text = _outcome(MemoryManager.from_config)
        text += "".join(str(w.message) for w in caught)
        leaks.check("MemoryManager.from_config (mongodb)", form, text + all_logs.text)
        all_logs.clear()
    leaks.report()
