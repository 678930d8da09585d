"""The ``firefly-orm`` command against SQLite and PostgreSQL.

The commands run in this process (``cli_runner.run_cli``: the exit status,
stdout and stderr a test of the installed script would see, without starting
a Python per call); ``test_the_installed_script`` and the wheel test run the
installed console script in a child process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cli_runner import MODE_VARIABLE, CliLeakError, run_installed
from cli_runner import run_cli as run
from dbutil import drop_schema

from firefly_orm import migrate
from firefly_orm.cli import _target as cli_target
from firefly_orm.cli import long_term_namespaces
from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MemoryEntry, MemoryScope, utcnow
from firefly_orm.long_term import DEFAULT_NAMESPACE, EPISODIC, LongTermMemory
from firefly_orm.sql import SQLAlchemyStore


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("firefly-orm: ")
    return lines[0]


@dataclass
class Target:
    url: str
    args: list[str] = field(default_factory=list)  # --url ... [--schema ...]
    schema: str | None = None

    def store(self) -> SQLAlchemyStore:
        return SQLAlchemyStore(self.url, schema_name=self.schema)


@contextmanager
def make_target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Target]:
    """A SQLite file under ``tmp_path`` (not created yet) or a fresh PostgreSQL schema."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'deep' / 'dir' / 'cli.sqlite3'}"
        yield Target(url, ["--url", url])
        return
    url = request.getfixturevalue("postgres_url")
    schema = "cli_" + uuid.uuid4().hex[:10]
    try:
        yield Target(url, ["--url", url, "--schema", schema], schema)
    finally:
        drop_schema(url, schema)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    with make_target(request.param, tmp_path, request) as made:
        yield made


def test_migrate_current_check_downgrade_stamp(target: Target) -> None:
    check = run("check", *target.args)
    assert check.returncode == 1
    assert "not at head" in check.stderr and migrate.head() in check.stderr

    up = run("migrate", *target.args)
    assert up.returncode == 0, up.stderr
    assert f"-> {migrate.head()}" in up.stdout
    assert migrate.current(target.url, schema_name=target.schema) == migrate.head()
    again = run("upgrade", *target.args)
    assert again.returncode == 0 and "already at" in again.stdout

    current = run("current", *target.args)
    assert current.returncode == 0
    assert current.stdout.strip() == f"{migrate.head()} (head)"
    assert run("check", *target.args).returncode == 0

    down = run("downgrade", "base", *target.args)
    assert down.returncode == 0, down.stderr
    assert migrate.current(target.url, schema_name=target.schema) is None
    assert run("check", *target.args).returncode == 1

    stamp = run("stamp", *target.args)  # records head without creating tables
    assert stamp.returncode == 0, stamp.stderr
    assert migrate.current(target.url, schema_name=target.schema) == migrate.head()


def test_history_lists_our_revisions() -> None:
    result = run("history")
    assert result.returncode == 0, result.stderr
    assert f"-> {migrate.head()} (head) [firefly_orm]" in result.stdout


def _seed(target: Target, expired: int = 2) -> str:
    store = target.store()
    try:
        store.save(
            "working:alice", MemoryEntry(key="lang", content="fr", scope=MemoryScope.WORKING)
        )
        store.save("working:bob", MemoryEntry(key="lang", content="de", scope=MemoryScope.WORKING))
        store.save("facts", MemoryEntry(content="sky is blue", scope=MemoryScope.LONG_TERM))
        past = utcnow() - timedelta(hours=1)
        for i in range(expired):
            store.save(
                "facts",
                MemoryEntry(content=i, expires_at=past, scope=MemoryScope.LONG_TERM),
            )
        conv = ConversationMemory(store=store)
        cid = conv.new_conversation()
        conv.add_turn(cid, "hello", "hi there")
        conv.add_turn(cid, "how are you?", "fine")
        conv.add_turn(conv.new_conversation(), "other", "conversation")
        return cid
    finally:
        store.close()


def _count(target: Target, where: str) -> int:
    table = f'"{target.schema}".memory_entries' if target.schema else "memory_entries"
    store = target.store()
    try:
        with store.engine.connect() as conn:
            query = sa.text(f"SELECT count(*) FROM {table} WHERE {where}")
            return int(conn.execute(query).scalar_one())
    finally:
        store.close()


def _seed_long_term(target: Target) -> None:
    """Three long-term items in the default namespace, one of them expired."""
    store = target.store()
    try:
        memory = LongTermMemory(store=store)
        memory.remember("Ada prefers tea over coffee", importance=0.9, tags=["drinks"])
        memory.remember("Bob plays chess on Sundays", user_id="bob")
        past = (utcnow() - timedelta(days=1)).isoformat()
        memory.import_items([{"text": "an old event", "kind": EPISODIC, "expires_at": past}])
    finally:
        store.close()


def _count_by_namespace(target: Target, where: str) -> dict[str, int]:
    table = f'"{target.schema}".memory_entries' if target.schema else "memory_entries"
    store = target.store()
    try:
        with store.engine.connect() as conn:
            query = f"SELECT namespace, count(*) FROM {table} WHERE {where} GROUP BY namespace"
            return {str(ns): int(n) for ns, n in conn.execute(sa.text(query))}
    finally:
        store.close()


def test_stats_and_cleanup(target: Target) -> None:
    assert run("migrate", *target.args).returncode == 0
    _seed(target, expired=3)
    _seed_long_term(target)
    result = run("stats", "--json", *target.args)
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    total = _count(target, "1=1")
    assert stats["total"] == total
    assert stats["expired"] == 3 + 1
    assert stats["conversations"] == _count_conversation_namespaces(target)
    assert stats["conversations"] == 2
    assert stats["by_prefix"]["working"] == 2
    assert stats["by_prefix"]["facts"] == 4
    # The two remember() calls also wrote the daily log (a line each, a day row per owner).
    log = f"{DEFAULT_NAMESPACE}:daily-log"
    assert stats["by_prefix"][DEFAULT_NAMESPACE] == 3 + 4
    assert sum(stats["by_prefix"].values()) == total
    assert stats["by_scope"]["working"] == 2
    assert stats["by_scope"]["long_term"] == 4 + 3 + 4
    assert sum(stats["by_scope"].values()) == total
    # Long-term entries: every LONG_TERM row, live and expired, per namespace.
    long_term = stats["long_term"]
    assert long_term["by_namespace"] == _count_by_namespace(target, "scope = 'long_term'")
    assert long_term["by_namespace"] == {"facts": 4, DEFAULT_NAMESPACE: 3, log: 4}
    assert long_term["entries"] == _count(target, "scope = 'long_term'") == 11
    assert long_term["expired"] == 3 + 1

    text = run("stats", *target.args)
    assert text.returncode == 0 and "conversations: 2" in text.stdout
    lines = text.stdout.splitlines()
    assert "long-term:     11 (4 expired)" in lines
    by_namespace = lines[lines.index("long-term entries by namespace:") + 1 :]
    assert [line.split() for line in by_namespace] == [
        ["facts", "4"],
        [DEFAULT_NAMESPACE, "3"],
        [log, "4"],
    ]

    cleanup = run("cleanup-expired", "--batch-size", "2", *target.args)
    assert cleanup.returncode == 0, cleanup.stderr
    assert cleanup.stdout.strip() == "deleted 4 expired entries"
    assert "[" not in cleanup.stderr  # stderr is not a terminal: no progress bar
    after = json.loads(run("stats", "--json", *target.args).stdout)
    assert after["expired"] == 0 and after["total"] == total - 4
    assert after["long_term"] == {
        "entries": 3 + 4,
        "expired": 0,
        "by_namespace": {"facts": 1, DEFAULT_NAMESPACE: 2, log: 4},
    }


def _count_conversation_namespaces(target: Target) -> int:
    table = f'"{target.schema}".memory_entries' if target.schema else "memory_entries"
    store = target.store()
    try:
        with store.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text(
                        f"SELECT count(DISTINCT namespace) FROM {table} "
                        "WHERE namespace LIKE 'conversation:%'"
                    )
                ).scalar_one()
            )
    finally:
        store.close()


def test_progress_bar_on_request(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.sqlite3'}"
    target = Target(url, ["--url", url])
    assert run("migrate", *target.args).returncode == 0
    store = target.store()
    past = utcnow() - timedelta(minutes=5)
    with store.unit_of_work() as uow:
        for i in range(40):
            uow.entries.save("old", MemoryEntry(content=i, expires_at=past))
        uow.commit()
    store.close()
    result = run("cleanup-expired", "--progress", "--batch-size", "7", *target.args)
    assert result.returncode == 0, result.stderr
    assert "deleted 40 expired entries" in result.stdout
    assert "cleanup-expired [" in result.stderr and "40/40" in result.stderr
    assert "Traceback" not in result.stderr


def test_export_import_round_trip(target: Target, tmp_path: Path) -> None:
    assert run("migrate", *target.args).returncode == 0
    cid = _seed(target)
    out = tmp_path / "out" / "conv.json"
    exported = run("export", cid, "-o", str(out), *target.args)
    assert exported.returncode == 0, exported.stderr
    data = json.loads(out.read_text())
    assert data["conversation_id"] == cid
    assert [t["user_prompt"] for t in data["turns"]] == ["hello", "how are you?"]

    # into a fresh SQLite database (cross-backend for the Postgres case)
    dest_url = f"sqlite:///{tmp_path / 'dest.sqlite3'}"
    assert run("migrate", "--url", dest_url).returncode == 0
    imported = run("import", str(out), "--url", dest_url)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == cid
    dest = SQLAlchemyStore(dest_url)
    try:
        conv = ConversationMemory(store=dest)
        assert [t.assistant_response for t in conv.get_turns(cid)] == ["hi there", "fine"]
        assert conv.export_conversation(cid)["turns"] == data["turns"]
    finally:
        dest.close()

    # --all to stdout: conversations, and the long-term section (version 2).  The
    # "facts" entries have the LONG_TERM scope but are not long-term memory items
    # (plain contents written with store.save): skipped with a warning.
    everything = run("export", "--all", *target.args)
    assert everything.returncode == 0, everything.stderr
    bundle = json.loads(everything.stdout)
    assert bundle["format_version"] == 2 and len(bundle["conversations"]) == 2
    assert bundle["long_term"] == []
    warning = "firefly-orm: warning: long-term namespace 'facts' not exported: "
    assert warning in everything.stderr and "is not a long-term item" in everything.stderr
    all_file = tmp_path / "all.json"
    all_file.write_text(everything.stdout)
    again = run("import", str(all_file), "--url", dest_url)
    assert again.returncode == 0, again.stderr
    assert len(again.stdout.split()) == 2

    # --no-long-term writes the version 1 bundle, as earlier releases did.
    conversations_only = run("export", "--all", "--no-long-term", *target.args)
    assert conversations_only.returncode == 0 and conversations_only.stderr == ""
    old_style = json.loads(conversations_only.stdout)
    assert old_style == {"format_version": 1, "conversations": bundle["conversations"]}

    missing = run("export", "no-such-conversation", *target.args)
    assert "no such conversation" in assert_one_line_error(missing, 1)


def test_url_and_schema_from_environment(target: Target) -> None:
    if target.schema is None:
        path = target.url.removeprefix("sqlite:///")
        env = {"FIREFLY_AGENTIC_MEMORY_SQLITE_PATH": path}
    else:
        env = {
            "FIREFLY_AGENTIC_MEMORY_POSTGRES_URL": target.url,
            "FIREFLY_AGENTIC_MEMORY_POSTGRES_SCHEMA": target.schema,
        }
    result = run("migrate", env=env)
    assert result.returncode == 0, result.stderr
    assert migrate.current(target.url, schema_name=target.schema) == migrate.head()
    assert run("check", env=env).returncode == 0


def test_data_commands_need_head(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite3"
    sa.create_engine(f"sqlite:///{path}").connect().close()  # exists, never migrated
    line = assert_one_line_error(run("stats", "--url", f"sqlite:///{path}"), 1)
    assert "database not at head" in line and "firefly-orm migrate" in line
    missing = assert_one_line_error(run("stats", "--url", f"sqlite:///{tmp_path / 'nope.db'}"), 3)
    assert "no such database file" in missing
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.postgres
def test_postgres_not_at_head_is_one_line(postgres_url: str) -> None:
    schema = "cli_none_" + uuid.uuid4().hex[:8]
    line = assert_one_line_error(run("stats", "--url", postgres_url, "--schema", schema), 1)
    assert "database not at head" in line


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["stats", "--url", "not a url"], 2, "not a database URL"),
        (["stats", "--url", "mysql://u@h/db"], 2, "unsupported database"),
        (["check"], 2, "no database"),
        (["check", "--url", "sqlite:///x.db", "--schema", "s"], 2, "PostgreSQL only"),
        (["check", "--url", "postgresql://u@h/db", "--schema", "bad;name"], 2, "schema_name"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], code: int, expected: str) -> None:
    assert expected in assert_one_line_error(run(*args), code)


@pytest.mark.parametrize("command", ["migrate", "check", "stats", "current"])
def test_unreachable_database_hides_password(command: str) -> None:
    url = "postgresql://app:s3cr3t-pw@127.0.0.1:1/nowhere"
    result = run(command, "--url", url, "--timeout", "2")
    line = assert_one_line_error(result, 3)
    assert "s3cr3t-pw" not in result.stderr + result.stdout
    assert "127.0.0.1:1" in line and "***" in line


def test_demo_command(tmp_path: Path) -> None:
    if importlib.util.find_spec("firefly_orm.demo") is None:
        assert "demo is not part" in assert_one_line_error(run("demo"), 3)
        return
    db = tmp_path / "demo.sqlite3"
    result = run("demo", "--path", str(db))
    assert result.returncode == 0, result.stderr
    assert db.exists()
    assert "unrecognized" in run("stats", "--path", "x").stderr  # only demo takes extras


# --------------------------------------------------------------------------- the installed script


def test_the_installed_script(tmp_path: Path) -> None:
    """The console script's wiring and a real process's exit statuses (0, 1, 2) and pipes:
    everything else here runs the same ``main`` in the test process."""
    helped = run_installed("--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: firefly-orm ") and "migrate" in helped.stdout
    url = f"sqlite:///{tmp_path / 'installed.sqlite3'}"
    pending = run_installed("check", "--url", url)
    assert pending.returncode == 1 and "not at head" in pending.stderr
    up = run_installed("migrate", "--url", url)
    assert up.returncode == 0, up.stderr
    assert f"-> {migrate.head()}" in up.stdout
    piped = run_installed("import", "-", "--url", url, input=_doc(_KEEP))
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.split() == ["keep"]
    bad = run_installed(
        "import", "-", "--url", url, input=b'{"conversation_id": "\xff", "turns": []}'
    )
    assert "not UTF-8" in assert_one_line_error(bad, 2)


@pytest.mark.skipif(
    os.environ.get(MODE_VARIABLE) == "subprocess", reason="the in-process runner is not used"
)
def test_the_in_process_runner_restores_state_and_finds_leaks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run_cli`` undoes what a call changes in the process (``--verbose``'s handlers,
    the environment), and fails a call that leaves a database connection open."""
    url = f"sqlite:///{tmp_path / 'runner.sqlite3'}"
    names = ("firefly_orm", "alembic", "")
    before = [(logging.getLogger(n).level, list(logging.getLogger(n).handlers)) for n in names]
    migrated = run("--verbose", "migrate", "--url", url)
    assert migrated.returncode == 0, migrated.stderr
    assert "INFO [alembic.runtime.migration] Running upgrade" in migrated.stderr
    assert [(logging.getLogger(n).level, logging.getLogger(n).handlers) for n in names] == before

    monkeypatch.setenv("FIREFLY_AGENTIC_MEMORY_SQLITE_PATH", str(tmp_path / "elsewhere.db"))
    assert "no database" in assert_one_line_error(run("check"), 2)  # the variable is dropped
    env = {"FIREFLY_AGENTIC_MEMORY_SQLITE_PATH": url.removeprefix("sqlite:///")}
    assert run("check", env=env).returncode == 0
    assert os.environ["FIREFLY_AGENTIC_MEMORY_SQLITE_PATH"] == str(tmp_path / "elsewhere.db")

    def never_closed(target: Any, args: Any) -> Any:
        return contextlib.nullcontext(cli_target._open_store(target, args))

    monkeypatch.setattr(cli_target, "_store", never_closed)
    with pytest.raises(CliLeakError, match="still open"):
        run("stats", "--url", url)


# --------------------------------------------------------------------------- the built wheel


@pytest.mark.slow
def test_wheel_cli_host_alembic_and_missing_extras(tmp_path: Path) -> None:
    """Build the wheel, install it (no extras) in a fresh venv, then from there:
    ``firefly-orm migrate``, a save/load round trip, the host's Alembic with our
    versions named as the package resource (mode (b)), and missing extras named."""
    import shutil

    repo = Path(__file__).resolve().parents[2]
    dist = tmp_path / "dist"
    # uv (pinned with the rest, beside this interpreter) builds the wheel with the
    # project's declared backend in an isolated environment, makes the venv and
    # installs the wheel and its pinned dependencies from its cache: the same
    # wheel and versions as pip, in seconds rather than a minute.
    uv = str(Path(sys.executable).with_name("uv"))
    build = subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(dist), str(repo)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(dist.glob("firefly_orm-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run(
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, timeout=120
    )
    vbin = venv / "bin"
    install = subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(vbin / "python"),
            "-c",
            str(repo / "requirements" / "constraints.txt"),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIREFLY_AGENTIC_")}

    def venv_run(*args: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), cwd=cwd, capture_output=True, text=True, timeout=180, env=env
        )

    db = tmp_path / "wheel.sqlite3"
    migrated = venv_run(str(vbin / "firefly-orm"), "migrate", "--url", f"sqlite:///{db}")
    assert migrated.returncode == 0, migrated.stderr
    assert venv_run(str(vbin / "firefly-orm"), "check", "--url", f"sqlite:///{db}").returncode == 0

    script = tmp_path / "round_trip.py"
    script.write_text(
        "import sys\n"
        "from firefly_orm import MemoryEntry, MissingExtraError, SQLiteStore, migrate\n"
        "assert 'site-packages' in migrate.script_location()\n"
        "store = SQLiteStore(sys.argv[1])\n"
        "store.initialize(migrate=False)\n"
        "store.save('ns', MemoryEntry(key='k', content={'x': 41}))\n"
        "print(store.load_by_key('ns', 'k').content['x'] + 1)\n"
        "store.close()\n"
        "try:\n"
        "    from firefly_orm import MongoDBStore\n"
        "except MissingExtraError as exc:\n"
        "    print('mongo-extra:', exc)\n"
    )
    round_trip = venv_run(str(vbin / "python"), str(script), str(db))
    assert round_trip.returncode == 0, round_trip.stderr
    lines = round_trip.stdout.splitlines()
    assert lines[0] == "42"
    assert lines[1].startswith("mongo-extra:") and "'mongo'" in lines[1]
    assert "firefly-orm[mongo]" in lines[1]

    # a PostgreSQL URL without the 'postgres' extra: one line naming the extra
    no_pg = venv_run(str(vbin / "firefly-orm"), "check", "--url", "postgresql://u:pw@127.0.0.1:1/x")
    line = assert_one_line_error(no_pg, 3)
    assert "'postgres'" in line and "firefly-orm[postgres]" in line

    # mode (b) with the ini exactly as documented: firefly_orm:migrations/versions
    host = tmp_path / "host_app"
    shutil.copytree(
        Path(__file__).resolve().parents[1] / "host_app",
        host,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    host_db = f"sqlite:///{tmp_path / 'host.sqlite3'}"
    alembic = str(vbin / "alembic")
    ini = str(host / "alembic-with-firefly.ini")
    up = venv_run(alembic, "-c", ini, "-x", f"url={host_db}", "upgrade", "heads")
    assert up.returncode == 0, up.stderr
    check = venv_run(alembic, "-c", ini, "-x", f"url={host_db}", "check")
    assert check.returncode == 0, check.stdout + check.stderr
    ours = venv_run(str(vbin / "firefly-orm"), "check", "--url", host_db)
    assert ours.returncode == 0, ours.stderr


@pytest.mark.parametrize("bad_raw", ["oops", 5, {"format": "nope"}])
def test_import_validates_every_item_before_writing(
    target: Target, tmp_path: Path, bad_raw: object
) -> None:
    assert run("migrate", *target.args).returncode == 0
    good = {"conversation_id": "good", "turns": [{"user_prompt": "a", "assistant_response": "b"}]}
    bad = {"conversation_id": "bad", "turns": [{"user_prompt": "a", "raw_messages": bad_raw}]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format_version": 1, "conversations": [good, bad]}))
    result = run("import", str(path), *target.args)
    line = assert_one_line_error(result, 2)
    assert "raw_messages" in line and "'bad'" in line
    assert result.stdout == ""
    store = target.store()
    try:
        assert ConversationMemory(store=store).conversation_ids == []
    finally:
        store.close()

    # A valid file: each id is printed as it is imported, in file order.
    second = {"conversation_id": "second", "turns": [{"user_prompt": "c"}]}
    path.write_text(json.dumps([good, second]))
    result = run("import", str(path), *target.args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["good", "second"]
    store = target.store()
    try:
        assert sorted(ConversationMemory(store=store).conversation_ids) == ["good", "second"]
    finally:
        store.close()


# --------------------------------------------------------------------------- hostile import files

_KEEP = {
    "conversation_id": "keep",
    "turns": [{"user_prompt": "kept", "assistant_response": "as it was", "metadata": {"n": 1}}],
    "summary": "old summary",
}
_GOOD = {"conversation_id": "good", "turns": [{"user_prompt": "a", "assistant_response": "b"}]}
# JSON's "\ud800" escape decodes to a lone surrogate: valid JSON that passes the
# import's parsing and is refused by the store only when it is written.
_UNWRITABLE = '{"conversation_id": "late", "turns": [{"user_prompt": "x\\ud800"}]}'


def _doc(*conversations: object) -> bytes:
    return json.dumps({"format_version": 1, "conversations": list(conversations)}).encode()


#: A long-term item stored before each hostile import (the files try to replace it).
_KEPT_ITEM = {"text": "kept as it was", "key": "kept", "importance": 0.4, "tags": ["old"]}
#: The same key with new contents: written, then undone when a later part fails.
_REPLACING_ITEM = {"text": "replaced", "key": "kept", "importance": 0.9}


def _section(*items: object, namespace: str = DEFAULT_NAMESPACE, **extra: object) -> object:
    return {"namespace": namespace, "items": list(items), **extra}


def _bundle(*sections: object, conversations: tuple[object, ...] = (_GOOD,)) -> bytes:
    """A version 2 bundle: a good conversation (written first), then ``sections``."""
    data = {"format_version": 2, "conversations": list(conversations), "long_term": sections}
    return json.dumps(data).encode()


def _raw_bundle(long_term: str, version: int = 2) -> bytes:
    return (
        f'{{"format_version": {version}, "conversations": [], "long_term": {long_term}}}'.encode()
    )


#: Hostile long-term sections.  Each file starts with a good conversation and,
#: where it says "replaces", an item replacing the stored one: the write of
#: those happens before the bad part is reached, so the unit of work must undo it.
HOSTILE_LONG_TERM: list[tuple[str, bytes, str]] = [
    ("lt-not-a-list", _raw_bundle("{}"), '"long_term" must be a list, got dict'),
    ("lt-in-version-1", _raw_bundle("[]", version=1), '"long_term" needs format_version 2'),
    ("lt-section-not-object", _raw_bundle("[1]"), "long_term[0]: must be an object"),
    (
        "lt-unknown-section-key",
        _bundle(_section(owner=1)),
        "long_term[0]: unexpected key(s) 'owner'",
    ),
    ("lt-no-namespace", _raw_bundle('[{"items": []}]'), "long_term[0]: namespace"),
    ("lt-empty-namespace", _bundle(_section(namespace="")), "long_term[0]: namespace"),
    ("lt-nul-namespace", _bundle(_section(namespace="a\x00b")), "long_term[0]: namespace"),
    ("lt-int-namespace", _raw_bundle('[{"namespace": 5, "items": []}]'), "namespace"),
    (
        "lt-items-not-list",
        _raw_bundle('[{"namespace": "n", "items": {}}]'),
        '"items" must be a list',
    ),
    ("lt-no-items", _raw_bundle('[{"namespace": "n"}]'), '"items" must be a list'),
    ("lt-bad-language", _bundle(_section(language="Bad Lang")), "long_term[0]: language"),
    ("lt-duplicate-namespace", _bundle(_section(), _section()), "already long_term[0]"),
    (
        "lt-replaces-then-bad-importance",
        _bundle(_section(_REPLACING_ITEM, {"text": "x", "importance": 7})),
        "long_term[0].items[1].importance: must be a number from 0.0 to 1.0, got 7 "
        "(namespace 'long-term')",
    ),
    ("lt-item-not-dict", _bundle(_section("text")), "long_term[0].items[0]: must be a dict"),
    ("lt-blank-text", _bundle(_section({"text": "  "})), "long_term[0].items[0].text"),
    ("lt-no-text", _bundle(_section({"importance": 0.5})), "long_term[0].items[0].text"),
    ("lt-unknown-field", _bundle(_section({"text": "a", "colour": 1})), "items[0].colour"),
    ("lt-bad-kind", _bundle(_section({"text": "a", "kind": "dream"})), "items[0].kind"),
    ("lt-bad-tags", _bundle(_section({"text": "a", "tags": "x"})), "items[0].tags"),
    (
        "lt-bad-created-at",
        _bundle(_section({"text": "a", "created_at": "yesterday"})),
        "items[0].created_at",
    ),
    (
        "lt-naive-created-at",
        _bundle(_section({"text": "a", "created_at": "2024-05-01T10:00:00"})),
        "items[0].created_at: must be timezone-aware",
    ),
    ("lt-bool-importance", _bundle(_section({"text": "a", "importance": True})), "importance"),
    (
        "lt-same-item-twice",
        _bundle(_section({"text": "a", "key": "k"}, {"text": "b", "key": "k"})),
        "items[1]: names the same item as items[0]",
    ),
    (
        "lt-replaces-then-second-section-bad",
        _bundle(_section(_REPLACING_ITEM), _section({"text": "a", "id": ""}, namespace="other")),
        "long_term[1].items[0].id",
    ),
    (
        # Passes the item checks, refused by the store when written: after the
        # conversation and the first section are already in the transaction.
        "lt-replaces-then-unwritable-metadata",
        _bundle(
            _section(_REPLACING_ITEM),
            _section({"text": "a", "metadata": {"m": "\ud800"}}, namespace="other"),
        ),
        "surrogate",
    ),
]


HOSTILE_IMPORTS: list[tuple[str, bytes, str]] = [
    ("utf16-bom", '{"conversation_id": "u", "turns": []}'.encode("utf-16"), "UTF-16"),
    ("utf32-bom", '{"conversation_id": "u", "turns": []}'.encode("utf-32"), "UTF-32"),
    ("invalid-utf8", b'{"conversation_id": "\xff\xfe", "turns": []}', "not UTF-8"),
    ("100000-nested-brackets", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("100000-nested-objects", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
    ("not-json", b"{nope", "not JSON"),
    ("empty-file", b"", "not JSON"),
    ("nan", b'{"conversation_id": "n", "turns": [{"metadata": {"x": NaN}}]}', "NaN"),
    (
        "int-too-long",
        b'{"conversation_id": "n", "turns": [{"token_estimate": ' + b"9" * 5000 + b"}]}",
        "an integer of 5000 digits",
    ),
    ("conversations-is-a-string", b'{"conversations": "x"}', '"conversations" must be a list'),
    ("conversations-is-null", b'{"conversations": null}', '"conversations" must be a list'),
    (
        "format-version-5",
        b'{"format_version": 5, "conversations": []}',
        "format_version 5 is not supported (expected 1 or 2 or 3 or 4)",
    ),
    (
        "state-needs-version-4",
        b'{"format_version": 3, "conversations": [], "state": {}}',
        '"state" needs format_version 4',
    ),
    (
        "state-bad-key",
        b'{"format_version": 4, "conversations": [], "state": {"users": {"u": {"": 1}}}}',
        "state.users['u']: keys must be non-empty strings",
    ),
    ("format-version-string", b'{"format_version": "1", "conversations": []}', "'1'"),
    ("format-version-list", b'{"format_version": [1], "conversations": []}', "[1]"),
    ("bundle-extra-key", b'{"format_version": 1, "conversations": [], "x": 1}', "'x'"),
    ("scalar", b"5", "got int"),
    ("string", b'"conversation"', "got str"),
    ("null", b"null", "got NoneType"),
    ("non-dict-item", _doc(_GOOD, 1), "conversations[1]: must be a conversation object"),
    ("non-dict-in-list", json.dumps([_GOOD, [1]]).encode(), "conversations[1]"),
    ("unknown-key", json.dumps({"conversation": _GOOD}).encode(), "'conversation'"),
    ("no-turns", b'{"conversation_id": "t"}', '"turns" must be a list'),
    ("turns-is-a-dict", b'{"conversation_id": "t", "turns": {}}', '"turns" must be a list'),
    ("no-conversation-id", b'{"turns": []}', "conversation_id"),
    ("empty-conversation-id", b'{"conversation_id": "", "turns": []}', "conversation_id"),
    ("int-conversation-id", b'{"conversation_id": 7, "turns": []}', "conversation_id"),
    ("duplicate-id", _doc(_GOOD, _GOOD), "same conversation id"),
    ("second-has-bad-turn", _doc(_GOOD, {"conversation_id": "b", "turns": ["x"]}), "'b'"),
    (
        "second-too-deep-in-metadata",
        _doc(_GOOD, {"conversation_id": "d", "turns": [{"metadata": {"m": 1}}]}).replace(
            b'"m": 1', b'"m": ' + b"[" * 990 + b"]" * 990
        ),
        "",
    ),
    (
        "second-unwritable",
        b'{"conversations": [' + json.dumps(_GOOD).encode() + b", " + _UNWRITABLE.encode() + b"]}",
        "surrogate",
    ),
    (
        "replaces-then-fails",
        b"["
        + json.dumps({"conversation_id": "keep", "turns": []}).encode()
        + b", "
        + _UNWRITABLE.encode()
        + b"]",
        "surrogate",
    ),
]


def _snapshot(target: Target) -> list[tuple[Any, ...]]:
    """Every stored row, every column, in entry id order: the store's whole content."""
    store = target.store()
    try:
        store.initialize()  # migrates a fresh database; a no-op at head
        table: sa.Table = MemoryEntry.__table__  # type: ignore[attr-defined]
        with store.engine.connect() as conn:
            rows = conn.execute(sa.select(table).order_by(table.c.entry_id)).all()
        return [tuple(row) for row in rows]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(content, expected, id=name)
        for name, content, expected in HOSTILE_IMPORTS + HOSTILE_LONG_TERM
    ],
)
def test_hostile_import_file_is_refused_and_writes_nothing(
    target: Target, tmp_path: Path, content: bytes, expected: str
) -> None:
    """Each hostile file: exit 2, one line on stderr, no traceback, the store unchanged."""
    if target.schema is None:  # a SQLite file in a directory not created yet
        Path(target.url.removeprefix("sqlite:///")).parent.mkdir(parents=True)
    _snapshot(target)  # migrate
    store = target.store()
    try:
        ConversationMemory(store=store).import_conversation(_KEEP)
        LongTermMemory(store=store).import_items([_KEPT_ITEM])
    finally:
        store.close()
    before = _snapshot(target)
    assert [item["text"] for item in _items(target, DEFAULT_NAMESPACE)] == ["kept as it was"]

    path = tmp_path / "hostile.json"
    path.write_bytes(content)
    result = run("import", str(path), *target.args)
    line = assert_one_line_error(result, 2)
    assert expected in line
    assert result.stdout == ""
    assert _snapshot(target) == before


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_unreadable_import_file_is_a_usage_error(tmp_path: Path, kind: str) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    assert run("migrate", "--url", url).returncode == 0
    path = tmp_path / "input"
    if kind == "directory":
        path.mkdir()
    line = assert_one_line_error(run("import", str(path), "--url", url), 2)
    assert f"cannot read {path}" in line
    assert json.loads(run("export", "--all", "--url", url).stdout)["conversations"] == []


def test_import_accepts_utf8_bom_stdin_and_conversation_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    assert run("migrate", "--url", url).returncode == 0
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_GOOD).encode())
    result = run("import", str(path), "--url", url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["good"]
    copy = run("import", str(path), "--conversation-id", "copy", "--url", url)
    assert copy.returncode == 0 and copy.stdout.split() == ["copy"]
    both = tmp_path / "both.json"
    both.write_bytes(_doc(_GOOD, _KEEP))
    refused = run("import", str(both), "--conversation-id", "x", "--url", url)
    assert "exactly one conversation" in assert_one_line_error(refused, 2)
    piped = run("import", "-", "--url", url, input=_doc(_KEEP))
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.split() == ["keep"]
    bad_pipe = run("import", "-", "--url", url, input=b'{"conversation_id": "\xff", "turns": []}')
    assert bad_pipe.returncode == 2 and "Traceback" not in bad_pipe.stderr
    assert "not UTF-8" in bad_pipe.stderr
    ids = [
        c["conversation_id"]
        for c in json.loads(run("export", "--all", "--url", url).stdout)["conversations"]
    ]
    assert sorted(ids) == ["copy", "good", "keep"]


# --------------------------------------------------------------------------- long-term items

#: The item fields an export carries and an import must restore exactly (not
#: the id: an unkeyed item imported into another database gets an id derived
#: from the exported one).
ITEM_FIELDS = ("text", "importance", "tags", "kind", "key", "user_id", "created_at", "metadata")
#: A second namespace, indexed with stemming (PostgreSQL's ``english``).
TEAM = "team-notes"


def _seed_items(target: Target) -> None:
    """Long-term items with every field set, in two namespaces, plus one expired item."""
    store = target.store()
    try:
        memory = LongTermMemory(store=store)
        memory.remember(
            "Ada prefers tea over coffee",
            importance=0.8,
            tags=["drinks", "prefs"],
            key="drink",
            user_id="ada",
            metadata={"source": {"chat": 1}, "list": [1, "two", None, 2.5], "ok": True},
        )
        memory.remember(
            "Met Bob at the Lisbon conference",
            importance=0.3,
            kind=EPISODIC,
            tags=["events"],
            expires_at=utcnow() + timedelta(days=30),
        )
        memory.remember('Unicode: naïve café, 日本語, emoji 🫖, quote " and \\', importance=0.0)
        memory.remember("Bob's most important fact", importance=1.0, user_id="bob")
        memory.remember("Bob's keyed fact", key="drink", user_id="bob")  # same key, other user
        past = (utcnow() - timedelta(hours=1)).isoformat()
        memory.import_items([{"text": "long gone", "kind": EPISODIC, "expires_at": past}])
        team = LongTermMemory(store=store, namespace=TEAM, language="english")
        team.remember("Deploys run on Fridays", importance=0.7, tags=["ops"])
        team.remember("The staging database is rebuilt nightly", key="staging")
    finally:
        store.close()


def _items(target: Target, namespace: str) -> list[dict[str, Any]]:
    """The live items of ``namespace``, oldest first, as exported (ids included)."""
    store = target.store()
    try:
        return LongTermMemory(store=store, namespace=namespace).export_items()
    finally:
        store.close()


def _fields(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{name: item[name] for name in ITEM_FIELDS} for item in items]


def _languages(target: Target) -> dict[str, list[str | None]]:
    """The search language of every live long-term entry, per namespace."""
    store = target.store()
    try:
        found = long_term_namespaces(store)
    finally:
        store.close()
    return {ns: sorted(languages, key=str) for ns, languages in found.items()}


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("source_kind", "dest_kind"), [("sqlite", "postgres"), ("postgres", "sqlite")]
)
def test_long_term_items_round_trip_across_backends(
    request: pytest.FixtureRequest, tmp_path: Path, source_kind: str, dest_kind: str
) -> None:
    with (
        make_target(source_kind, tmp_path / "source", request) as source,
        make_target(dest_kind, tmp_path / "dest", request) as dest,
    ):
        for db in (source, dest):
            assert run("migrate", *db.args).returncode == 0
        cid = _seed(source)
        _seed_items(source)
        source_items = {ns: _items(source, ns) for ns in (DEFAULT_NAMESPACE, TEAM)}
        assert [len(items) for items in source_items.values()] == [5, 2]  # not the expired one

        out = tmp_path / "backup.json"
        exported = run("export", "--all", "-o", str(out), *source.args)
        assert exported.returncode == 0, exported.stderr
        assert "exported 2 conversation(s) and 7 long-term item(s) from 2 namespace(s)" in (
            exported.stderr
        )
        data = json.loads(out.read_text(encoding="utf-8"))
        assert data["format_version"] == 2
        assert [(s["namespace"], s["language"]) for s in data["long_term"]] == [
            (DEFAULT_NAMESPACE, None),
            (TEAM, "english"),
        ]
        assert [s["items"] for s in data["long_term"]] == list(source_items.values())

        imported = run("import", str(out), *dest.args)
        assert imported.returncode == 0, imported.stderr
        assert sorted(imported.stdout.split()) == sorted(
            c["conversation_id"] for c in data["conversations"]
        )
        assert imported.stderr.splitlines() == [
            f"imported 5 long-term item(s) into namespace '{DEFAULT_NAMESPACE}'",
            f"imported 2 long-term item(s) into namespace '{TEAM}'",
        ]
        dest_items = {ns: _items(dest, ns) for ns in (DEFAULT_NAMESPACE, TEAM)}
        for ns, items in source_items.items():
            assert _fields(dest_items[ns]) == _fields(items), ns
            # keyed items keep their id (derived from namespace, owner and key)
            keyed = {i["id"] for i in items if i["key"] is not None}
            assert keyed == {i["id"] for i in dest_items[ns] if i["key"] is not None}
        assert _languages(dest) == {DEFAULT_NAMESPACE: [None], TEAM: ["english"]}
        store = dest.store()
        try:
            conv = ConversationMemory(store=store)
            assert [t.user_prompt for t in conv.get_turns(cid)] == ["hello", "how are you?"]
            recalled = LongTermMemory(store=store, user_id="ada").recall("tea or coffee?")
            assert [r.item.text for r in recalled] == ["Ada prefers tea over coffee"]
        finally:
            store.close()
        stats = json.loads(run("stats", "--json", *dest.args).stdout)["long_term"]
        assert stats == {
            "entries": 7,
            "expired": 0,
            "by_namespace": {DEFAULT_NAMESPACE: 5, TEAM: 2},
        }

        # Importing the same file again writes each item once, unchanged.
        rows = _snapshot(dest)
        again = run("import", str(out), *dest.args)
        assert again.returncode == 0, again.stderr
        assert {ns: _items(dest, ns) for ns in (DEFAULT_NAMESPACE, TEAM)} == dest_items
        assert len(_snapshot(dest)) == len(rows)

        # Restoring the backup over its own source replaces every item in place.
        source_rows = _snapshot(source)
        restored = run("import", str(out), *source.args)
        assert restored.returncode == 0, restored.stderr
        assert {ns: _items(source, ns) for ns in (DEFAULT_NAMESPACE, TEAM)} == source_items
        assert len(_snapshot(source)) == len(source_rows)


def test_export_long_term_namespace_options(target: Target, tmp_path: Path) -> None:
    assert run("migrate", *target.args).returncode == 0
    _seed(target)  # raw LONG_TERM entries in "facts": not long-term memory items
    _seed_items(target)
    store = target.store()
    try:  # a namespace whose items were indexed with two languages
        LongTermMemory(store=store, namespace="mixed").remember("plain words")
        LongTermMemory(store=store, namespace="mixed", language="english").remember("stemmed")
        LongTermMemory(store=store, namespace="mixed", language="english").remember("again")
    finally:
        store.close()

    one = run("export", "--long-term-namespace", TEAM, *target.args)
    assert one.returncode == 0, one.stderr
    data = json.loads(one.stdout)
    assert data["conversations"] == []
    assert data["long_term"] == [
        {"namespace": TEAM, "language": "english", "items": _items(target, TEAM)}
    ]
    # repeated (and repeated twice): in the order given, once each
    two = run(
        "export",
        "--long-term-namespace", TEAM,
        "--long-term-namespace", DEFAULT_NAMESPACE,
        "--long-term-namespace", TEAM,
        *target.args,
    )  # fmt: skip
    assert [s["namespace"] for s in json.loads(two.stdout)["long_term"]] == [
        TEAM,
        DEFAULT_NAMESPACE,
    ]
    # with conversation ids: a bundle of those conversations and the named items
    store = target.store()
    try:
        cid = ConversationMemory(store=store).conversation_ids[0]
    finally:
        store.close()
    both = json.loads(run("export", cid, "--long-term-namespace", TEAM, *target.args).stdout)
    assert [c["conversation_id"] for c in both["conversations"]] == [cid]
    assert [s["namespace"] for s in both["long_term"]] == [TEAM]
    # a conversation alone is still the plain conversation object
    assert "turns" in json.loads(run("export", cid, *target.args).stdout)

    everything = run("export", "--all", *target.args)
    assert everything.returncode == 0, everything.stderr
    sections = json.loads(everything.stdout)["long_term"]
    assert [s["namespace"] for s in sections] == [DEFAULT_NAMESPACE, "mixed", TEAM]
    assert sections[1]["language"] == "english" and len(sections[1]["items"]) == 3
    warnings = everything.stderr.splitlines()
    assert len(warnings) == 2, everything.stderr
    assert warnings[0].startswith("firefly-orm: warning: long-term namespace 'facts' not exported")
    assert warnings[1] == (
        "firefly-orm: warning: long-term namespace 'mixed' mixes search languages "
        "(english: 2, simple: 1); the export records 'english', and an import indexes "
        "every item of the namespace with it"
    )

    named_raw = run("export", "--long-term-namespace", "facts", *target.args)
    assert "is not a long-term item" in assert_one_line_error(named_raw, 3)
    missing = run(
        "export", "--long-term-namespace", "nowhere", "--long-term-namespace", TEAM, *target.args
    )
    assert "no long-term items in namespace(s): 'nowhere'" in assert_one_line_error(missing, 1)
    conflict = run("export", "--all", "--no-long-term", "--long-term-namespace", TEAM, *target.args)
    assert "exclude each other" in assert_one_line_error(conflict, 2)
    nothing = run("export", *target.args)
    assert "--long-term-namespace" in assert_one_line_error(nothing, 2)
    empty = run("export", "--long-term-namespace", "", *target.args)
    assert "namespace" in assert_one_line_error(empty, 2)


@pytest.mark.postgres
def test_import_refused_by_postgres_writes_nothing(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A write PostgreSQL refuses (a text-search configuration it does not have)
    after the conversation and a first namespace: exit 3, nothing written."""
    with make_target("postgres", tmp_path, request) as target:
        before = _snapshot(target)
        path = tmp_path / "unknown-language.json"
        path.write_bytes(
            _bundle(
                _section({"text": "fine"}),
                _section({"text": "indexed how?"}, namespace="other", language="no_such_config"),
            )
        )
        result = run("import", str(path), *target.args)
        line = assert_one_line_error(result, 3)
        assert "no_such_config" in line
        assert result.stdout == ""
        assert _snapshot(target) == before


@pytest.mark.postgres
def test_large_import_refreshes_planner_statistics_once_committed(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_admin_engine: sa.Engine
) -> None:
    """The import's writes are joined into one transaction (no store of their own
    to analyze), so the command refreshes the statistics after the commit: at
    ``ANALYZE_AFTER_ROWS`` rows written (turns plus items), not below."""
    from firefly_orm.conversation._transfer import ANALYZE_AFTER_ROWS

    def analyze_count(schema: str) -> int:
        with postgres_admin_engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text(
                        "SELECT analyze_count FROM pg_stat_user_tables "
                        "WHERE schemaname = :s AND relname = 'memory_entries'"
                    ),
                    {"s": schema},
                ).scalar_one()
            )

    turns = [{"user_prompt": f"q{i}", "assistant_response": "a"} for i in range(10)]
    for rows, expected in ((ANALYZE_AFTER_ROWS - 1, 0), (ANALYZE_AFTER_ROWS, 1)):
        with make_target("postgres", tmp_path, request) as target:
            assert run("migrate", *target.args).returncode == 0
            items = [{"text": f"item {i}", "id": f"i{i}"} for i in range(rows - len(turns))]
            path = tmp_path / f"{rows}.json"
            path.write_bytes(
                _bundle(_section(*items), conversations=({"conversation_id": "c", "turns": turns},))
            )
            result = run("import", str(path), *target.args)
            assert result.returncode == 0, result.stderr
            assert target.schema is not None
            assert analyze_count(target.schema) == expected, rows
