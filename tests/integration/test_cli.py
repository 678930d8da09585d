"""The ``firefly-orm`` console script, run as installed, against SQLite and PostgreSQL."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from firefly_orm import migrate
from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MemoryEntry, MemoryScope, utcnow
from firefly_orm.sql import SQLAlchemyStore

EXE = Path(sys.executable).with_name("firefly-orm")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FIREFLY_AGENTIC_")}
    environ.update(env or {})
    return subprocess.run(
        [str(EXE), *args], capture_output=True, text=True, timeout=120, env=environ
    )


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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'deep' / 'dir' / 'cli.sqlite3'}"
        yield Target(url, ["--url", url])
        return
    url = request.getfixturevalue("postgres_url")
    schema = "cli_" + uuid.uuid4().hex[:10]
    try:
        yield Target(url, ["--url", url, "--schema", schema], schema)
    finally:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        with engine.begin() as conn:
            conn.execute(sa.schema.DropSchema(schema, cascade=True, if_exists=True))
        engine.dispose()


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


def test_stats_and_cleanup(target: Target) -> None:
    assert run("migrate", *target.args).returncode == 0
    _seed(target, expired=3)
    result = run("stats", "--json", *target.args)
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    total = _count(target, "1=1")
    assert stats["total"] == total
    assert stats["expired"] == 3
    assert stats["conversations"] == _count_conversation_namespaces(target)
    assert stats["conversations"] == 2
    assert stats["by_prefix"]["working"] == 2
    assert stats["by_prefix"]["facts"] == 4
    assert sum(stats["by_prefix"].values()) == total
    assert stats["by_scope"]["working"] == 2
    assert stats["by_scope"]["long_term"] == 4
    assert sum(stats["by_scope"].values()) == total

    text = run("stats", *target.args)
    assert text.returncode == 0 and "conversations: 2" in text.stdout

    cleanup = run("cleanup-expired", "--batch-size", "2", *target.args)
    assert cleanup.returncode == 0, cleanup.stderr
    assert cleanup.stdout.strip() == "deleted 3 expired entries"
    assert "[" not in cleanup.stderr  # stderr is not a terminal: no progress bar
    after = json.loads(run("stats", "--json", *target.args).stdout)
    assert after["expired"] == 0 and after["total"] == total - 3


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

    # --all to stdout, re-imported as a list
    everything = run("export", "--all", *target.args)
    assert everything.returncode == 0, everything.stderr
    bundle = json.loads(everything.stdout)
    assert bundle["format_version"] == 1 and len(bundle["conversations"]) == 2
    all_file = tmp_path / "all.json"
    all_file.write_text(everything.stdout)
    again = run("import", str(all_file), "--url", dest_url)
    assert again.returncode == 0, again.stderr
    assert len(again.stdout.split()) == 2

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


# --------------------------------------------------------------------------- the built wheel


@pytest.mark.slow
def test_wheel_cli_host_alembic_and_missing_extras(tmp_path: Path) -> None:
    """Build the wheel, install it (no extras) in a fresh venv, then from there:
    ``firefly-orm migrate``, a save/load round trip, the host's Alembic with our
    versions named as the package resource (mode (b)), and missing extras named."""
    import shutil

    repo = Path(__file__).resolve().parents[2]
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(repo)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(dist.glob("firefly_orm-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    vbin = venv / "bin"
    install = subprocess.run(
        [
            str(vbin / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
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
        "not JSON",
    ),
    ("conversations-is-a-string", b'{"conversations": "x"}', '"conversations" must be a list'),
    ("conversations-is-null", b'{"conversations": null}', '"conversations" must be a list'),
    ("format-version-2", b'{"format_version": 2, "conversations": []}', "format_version 2"),
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


def _snapshot(target: Target) -> list[dict[str, object]]:
    """Every stored row (namespace, key, content...), read in-process: the store's content."""
    store = target.store()
    try:
        store.initialize()  # migrates a fresh database; a no-op at head
        conv = ConversationMemory(store=store)
        exported = [conv.export_conversation(cid) for cid in sorted(conv.conversation_ids)]
        table = f'"{target.schema}".memory_entries' if target.schema else "memory_entries"
        with store.engine.connect() as conn:
            count = conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
        return [{"rows": int(count)}, *exported]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("content", "expected"),
    [pytest.param(content, expected, id=name) for name, content, expected in HOSTILE_IMPORTS],
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
    finally:
        store.close()
    before = _snapshot(target)
    assert len(before) == 2

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
    piped = subprocess.run(
        [str(EXE), "import", "-", "--url", url],
        input=_doc(_KEEP),
        capture_output=True,
        timeout=120,
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.split() == [b"keep"]
    bad_pipe = subprocess.run(
        [str(EXE), "import", "-", "--url", url],
        input=b'{"conversation_id": "\xff", "turns": []}',
        capture_output=True,
        timeout=120,
    )
    assert bad_pipe.returncode == 2 and b"Traceback" not in bad_pipe.stderr
    assert b"not UTF-8" in bad_pipe.stderr
    ids = [
        c["conversation_id"]
        for c in json.loads(run("export", "--all", "--url", url).stdout)["conversations"]
    ]
    assert sorted(ids) == ["copy", "good", "keep"]
