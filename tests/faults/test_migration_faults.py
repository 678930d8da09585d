"""Fault injection on migrations: concurrent migrators and kill -9 after every statement.

Issue 17, item 1.  Every entry point (``firefly-orm migrate``, ``alembic upgrade
head`` through our ``env.py``, ``migrate.upgrade``/``downgrade`` and a store's
``initialize()``) must

* serialise concurrent migrators of one database: N processes migrating one
  fresh database at once all exit 0 and leave it at head (the installed console
  scripts once, then processes forked from a server that imported the library,
  released at the same moment, every entry point mixed), and
* apply a whole upgrade or downgrade in ONE transaction: a process killed after
  any SQL statement leaves the database at its previous revision (or, once the
  commit is through, at the new one) and never half-migrated, and the next
  migration succeeds.

Each test prints its figures (attempts, failures, rounds whose migrators all ran
at once, crash points, unrecoverable).  The crash sweeps and the concurrent
rounds use a fork server (``migration_crash.py`` beside this file) that imports
the library once and forks one child per crash point or migrator.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import sqlalchemy as sa
from dbutil import drop_schema

from firefly_orm import cli, migrate
from firefly_orm.entry import TABLE_NAME, MemoryEntry
from firefly_orm.migrate import _lock as migration_lock
from firefly_orm.sql import PostgreSQLStore, SQLiteStore
from firefly_orm.sql._engines import _switch_to_wal

EXE = Path(sys.executable).with_name("firefly-orm")
ALEMBIC = Path(sys.executable).with_name("alembic")
REPO = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("migration_crash.py")
PROCS = 4
#: Rounds of forked migrators released at once (each round mixes the entry points).
SQLITE_ROUNDS = 8
PG_ROUNDS = 4
#: The entry points a round mixes (``migration_crash.py``); upgrades all.
#: On SQLite they include a store's initialize() racing ``alembic`` (env.py's own
#: engine, rollback journal) on one fresh file: see
#: test_store_initialize_waits_for_a_rollback_journal_migrator.
RACE_ENTRIES = ("cli", "alembic-cli", "library", "store", "alembic")


def _env() -> dict[str, str]:
    """Our environment without the library's own variables (the URL comes from --url)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("FIREFLY_AGENTIC_")}


# --------------------------------------------------------------------------- inspection


def _our_tables(url: str, schema: str | None) -> set[str]:
    """Our tables (and Alembic batch leftovers) in ``schema`` of ``url``."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        names = set(sa.inspect(engine).get_table_names(schema=schema))
    finally:
        engine.dispose()
    return {n for n in names if n in (TABLE_NAME, migrate.VERSION_TABLE) or "alembic_tmp" in n}


def _rows(url: str, schema: str | None) -> int:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            table = sa.table(TABLE_NAME, schema=schema)
            return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
    finally:
        engine.dispose()


def _version_rows(url: str, schema: str | None) -> list[str]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            table = sa.table(migrate.VERSION_TABLE, sa.column("version_num"), schema=schema)
            return list(conn.execute(sa.select(table.c.version_num)).scalars())
    finally:
        engine.dispose()


def _state(url: str, schema: str | None, rows: int) -> str:
    """``"head"`` / ``"base"`` when the database is consistently there, else ``"half"``.

    ``rows`` is how many entries a database at head must still hold (the
    downgrade sweep starts from one saved entry).
    """
    try:
        at = migrate.current(url, schema_name=schema)
        tables = _our_tables(url, schema)
    except Exception as exc:  # an unreadable database is not a consistent one
        print(f"  unreadable: {type(exc).__name__}: {exc}")
        return "half"
    leftovers = {t for t in tables if "alembic_tmp" in t}
    if leftovers:
        return "half"
    if at is None and TABLE_NAME not in tables:
        return "base"
    if (
        at == migrate.head()
        and TABLE_NAME in tables
        and migrate.check(url, schema_name=schema) == []
        and _rows(url, schema) == rows
    ):
        return "head"
    return "half"


# --------------------------------------------------------------------------- concurrent CLI runs


def _concurrent(commands: list[list[str]]) -> list[tuple[int, str]]:
    """Start every command at once; their exit codes and stderr."""
    procs = [
        subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=REPO,
        )
        for cmd in commands
    ]
    results = []
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        results.append((proc.returncode, err))
    return results


@dataclass
class ConcurrentFigures:
    attempts: int = 0
    failures: list[str] = field(default_factory=list)
    not_at_head: int = 0
    forked_rounds: int = 0
    #: Forked rounds in which every migrator was running at one moment.
    all_at_once: int = 0

    def record(self, results: list[tuple[int, str]]) -> None:
        for code, err in results:
            self.attempts += 1
            if code != 0 or "Traceback" in err:
                lines = err.strip().splitlines()
                self.failures.append(f"exit {code}: {lines[-1] if lines else ''}")

    def record_race(self, entries: list[str], results: list[dict[str, Any]]) -> None:
        """The results of one forked round (``Crasher.race``)."""
        self.forked_rounds += 1
        for entry, result in zip(entries, results, strict=True):
            self.attempts += 1
            if result["error"] is not None or result["exit_code"] != 0:
                self.failures.append(f"{entry}: exit {result['exit_code']}: {result['error']}")
        if all("started" in r for r in results):
            self.all_at_once += max(r["started"] for r in results) < min(
                r["ended"] for r in results
            )

    def report(self, what: str, rounds: int) -> None:
        print(
            f"\nconcurrent migrations ({what}): {rounds} rounds x {PROCS} processes, "
            f"attempts={self.attempts} failures={len(self.failures)} "
            f"databases not at head={self.not_at_head} "
            f"forked rounds with every migrator running at once={self.all_at_once}"
            f"/{self.forked_rounds}"
        )
        for line, count in Counter(self.failures).most_common(5):
            print(f"  {count} x {line}")

    def assert_clean(self) -> None:
        assert not self.failures, self.failures[:5]
        assert self.not_at_head == 0
        # released together, the migrators overlap (else this proved no concurrency)
        assert self.all_at_once * 2 >= self.forked_rounds, (
            f"only {self.all_at_once} of {self.forked_rounds} rounds ran at once"
        )


def _round_entries(round_no: int) -> list[str]:
    """The entry points of a forked round: every one of :data:`RACE_ENTRIES` over the rounds."""
    return [RACE_ENTRIES[(round_no + i) % len(RACE_ENTRIES)] for i in range(PROCS)]


def _at_head_once(url: str, schema: str | None) -> bool:
    return migrate.check(url, schema_name=schema) == [] and _version_rows(url, schema) == [
        migrate.head()
    ]


@pytest.mark.slow
def test_concurrent_sqlite_migrations(crasher: Crasher, tmp_path: Path) -> None:
    """N processes migrate one fresh SQLite file at once: all succeed, the file is at head.

    One round runs the installed console scripts (half ``firefly-orm migrate``,
    half ``alembic upgrade head``: our env.py connecting by itself); the other
    rounds fork their migrators from the fork server and release them at once,
    mixing every entry point (:data:`RACE_ENTRIES`; most rounds have a store and
    ``alembic`` together).
    """
    figures = ConcurrentFigures()
    url = f"sqlite:///{tmp_path / 'scripts.db'}"
    commands = [
        [str(ALEMBIC), "-x", f"url={url}", "upgrade", "head"]
        if i % 2
        else [str(EXE), "migrate", "--url", url]
        for i in range(PROCS)
    ]
    figures.record(_concurrent(commands))
    figures.not_at_head += not _at_head_once(url, None)
    for round_no in range(SQLITE_ROUNDS):
        url = f"sqlite:///{tmp_path / f'round{round_no}.db'}"
        entries = _round_entries(round_no)
        figures.record_race(entries, crasher.race(entries, "upgrade", url, None))
        figures.not_at_head += not _at_head_once(url, None)
    figures.report("sqlite, console scripts once, then every entry point", 1 + SQLITE_ROUNDS)
    figures.assert_clean()


@pytest.mark.slow
@pytest.mark.postgres
def test_concurrent_postgres_migrations(crasher: Crasher, postgres_url: str) -> None:
    """N processes migrate one fresh PostgreSQL schema at once: all succeed, schema at head."""
    figures = ConcurrentFigures()
    for round_no in range(PG_ROUNDS):
        schema = f"mcf_{uuid.uuid4().hex[:8]}_{round_no}"
        try:
            entries = _round_entries(round_no)
            figures.record_race(entries, crasher.race(entries, "upgrade", postgres_url, schema))
            figures.not_at_head += not _at_head_once(postgres_url, schema)
        finally:
            drop_schema(postgres_url, schema)
    figures.report("postgresql, every entry point", PG_ROUNDS)
    figures.assert_clean()


def test_store_initialize_waits_for_a_rollback_journal_migrator(tmp_path: Path) -> None:
    """A store's initialize() waits for another migrator's write lock on a fresh file."""
    path = tmp_path / "fresh.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # what env.py's own engine holds while it migrates
    holder.execute("CREATE TABLE someone_elses (a)")
    release = threading.Timer(0.5, holder.execute, ("COMMIT",))
    release.start()
    store = SQLiteStore(path)
    try:
        started = time.monotonic()
        store.initialize()
        assert time.monotonic() - started >= 0.4  # it waited for the lock
        assert migrate.check(f"sqlite:///{path}") == []
    finally:
        release.join()
        store.close()
        holder.close()


def test_wal_switch_gives_up_after_its_timeout(tmp_path: Path) -> None:
    """The WAL switch's wait is bounded: a lock never released fails with SQLite's error."""
    path = tmp_path / "held.db"
    holder = sqlite3.connect(path, isolation_level=None)
    waiter = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("CREATE TABLE someone_elses (a)")
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            _switch_to_wal(waiter.cursor(), 300)
        assert 0.2 <= time.monotonic() - started < 3.0
        holder.execute("COMMIT")
        _switch_to_wal(waiter.cursor(), 300)  # released: it switches
        assert waiter.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        holder.close()
        waiter.close()


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("firefly-orm: "), err
    return lines[0]


def test_cli_lock_timeout_is_one_line_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A migrator that cannot get SQLite's write lock in time: one line, exit 3, file as it was."""
    monkeypatch.setattr(migration_lock, "SQLITE_LOCK_TIMEOUT", 0.5)
    path = tmp_path / "locked.db"
    url = f"sqlite:///{path}"
    holder = sqlite3.connect(path, isolation_level=None)  # another writer, holding the lock
    try:
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        code = cli.main(["migrate", "--url", url])
        waited = time.monotonic() - started
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    line = _one_line_error(capsys.readouterr().err)
    print(f"\nlock timeout: exit {code} after {waited:.2f} s: {line}")
    assert code == cli.EXIT_ERROR and "database is locked" in line
    assert 0.4 <= waited < 4.0  # our timeout, not pysqlite's default 5 s
    assert migrate.current(url) is None and _our_tables(url, None) == set()
    assert cli.main(["migrate", "--url", url]) == 0  # the lock released: it migrates
    assert migrate.check(url) == []


@pytest.mark.parametrize("command", ["migrate", "downgrade", "stamp"])
def test_cli_unknown_revision_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Alembic's CommandError (a revision it cannot find) is a one-line usage error."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    migrate.upgrade(url)
    code = cli.main([command, "no_such_revision", "--url", url])
    line = _one_line_error(capsys.readouterr().err)
    assert code == cli.EXIT_USAGE and "no_such_revision" in line, line
    assert migrate.check(url) == []


# --------------------------------------------------------------------------- kill -9 sweeps


class Crasher:
    """Client of the fork server: run a migration, killed after statement k (0: never)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._log_file: IO[str] = log.open("w")
        self._proc = subprocess.Popen(
            [sys.executable, str(HELPER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
            env=_env(),
        )

    def run(
        self, entry: str, action: str, url: str, schema: str | None, kill_after: int
    ) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        request = {
            "entry": entry,
            "action": action,
            "url": url,
            "schema": schema,
            "kill_after": kill_after,
        }
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        assert line, f"fork server died; see {self.log}: {self.log.read_text()[-2000:]}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def race(
        self, entries: list[str], action: str, url: str, schema: str | None
    ) -> list[dict[str, Any]]:
        """One forked migrator per entry, released at once; their results (see the helper)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        race = [
            {"entry": e, "action": action, "url": url, "schema": schema, "kill_after": 0}
            for e in entries
        ]
        self._proc.stdin.write(json.dumps({"race": race}) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        assert line, f"fork server died; see {self.log}: {self.log.read_text()[-2000:]}"
        results: list[dict[str, Any]] = json.loads(line)["results"]
        return results

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)
        self._log_file.close()


@pytest.fixture(scope="module")
def crasher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crasher]:
    server = Crasher(tmp_path_factory.mktemp("crasher") / "children.log")
    yield server
    server.close()


@dataclass
class SweepFigures:
    points: int = 0
    states: list[str] = field(default_factory=list)
    unrecoverable: list[str] = field(default_factory=list)

    def report(self, what: str, total: int) -> None:
        counts = Counter(self.states)
        print(
            f"\nkill -9 after statement k ({what}): {total} statements, "
            f"crash points tried={self.points} left at previous revision={counts['previous']} "
            f"left at new revision={counts['new']} half-migrated={counts['half']} "
            f"unrecoverable={len(self.unrecoverable)}"
        )
        for line in self.unrecoverable[:5]:
            print(f"  {line}")

    def assert_clean(self) -> None:
        assert self.states.count("half") == 0, self.states
        assert not self.unrecoverable, self.unrecoverable[:5]
        assert "previous" in self.states
        # One transaction: one commit point.  Before it every crash leaves the
        # previous revision, after it the new one — never back and forth.
        first_new = self.states.index("new") if "new" in self.states else len(self.states)
        assert set(self.states[:first_new]) == {"previous"}, self.states
        assert set(self.states[first_new:]) <= {"new"}, self.states


def _sweep(
    crasher: Crasher,
    *,
    entry: str,
    action: str,
    fresh: Callable[[int], tuple[str, str | None]],
    points: Callable[[int], list[int]],
    cleanup: Callable[[str, str | None], None] = lambda url, schema: None,
) -> tuple[SweepFigures, int]:
    """Kill ``entry``'s ``action`` after each statement in ``points(total)``; check, recover.

    ``fresh(k)`` makes the database a crash point starts from: empty for an
    upgrade, at head with one saved entry for a downgrade.
    """
    url, schema = fresh(0)
    try:
        dry = crasher.run(entry, action, url, schema, 0)
    finally:
        cleanup(url, schema)
    assert dry["error"] is None and not dry["killed"], dry
    total = int(dry["statements"])
    before, after = ("base", "head") if action == "upgrade" else ("head", "base")
    rows = 0 if action == "upgrade" else 1
    figures = SweepFigures()
    for k in points(total):
        url, schema = fresh(k)
        try:
            answer = crasher.run(entry, action, url, schema, k)
            assert answer["killed"], (k, answer)
            figures.points += 1
            state = _state(url, schema, rows)
            figures.states.append({before: "previous", after: "new"}.get(state, "half"))
            try:
                # Run the interrupted migration again, then back to head.
                if action == "downgrade":
                    migrate.downgrade(url, "base", schema_name=schema)
                    assert migrate.current(url, schema_name=schema) is None
                migrate.upgrade(url, schema_name=schema)
                assert migrate.check(url, schema_name=schema) == []
            except Exception as exc:
                figures.unrecoverable.append(f"k={k} ({state}): {type(exc).__name__}: {exc}")
        finally:
            cleanup(url, schema)
    return figures, total


def _every_nth(step: int) -> Callable[[int], list[int]]:
    """Every ``step``-th statement, and the last few (around the commit)."""

    def points(total: int) -> list[int]:
        return sorted(set(range(1, total + 1, step)) | set(range(max(1, total - 3), total + 1)))

    return points


def _sqlite_template(directory: Path) -> Path:
    """A SQLite file at head holding one saved entry (the downgrade sweep's start)."""
    path = directory / "template.db"
    if not path.exists():
        store = SQLiteStore(path)
        try:
            store.save("ns", MemoryEntry(key="k", content={"kept": True}))
        finally:
            store.close()
    return path


def _copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy through SQLite's backup API (WAL content included)."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entry", "action", "step"),
    [
        ("cli", "upgrade", 1),
        ("cli", "downgrade", 2),
        ("alembic", "upgrade", 1),
        ("store", "upgrade", 2),
    ],
)
def test_sqlite_kill_after_every_statement(
    crasher: Crasher, tmp_path: Path, entry: str, action: str, step: int
) -> None:
    """SQLite: a migration killed after any statement leaves a migratable file.

    ``step`` 1 tries every statement, 2 every other one (and the last few).
    """
    started = time.monotonic()

    def fresh(k: int) -> tuple[str, str | None]:
        path = tmp_path / f"k{k}.db"
        if action == "downgrade":
            _copy_sqlite(_sqlite_template(tmp_path), path)
        return f"sqlite:///{path}", None

    figures, total = _sweep(
        crasher, entry=entry, action=action, fresh=fresh, points=_every_nth(step)
    )
    figures.report(f"sqlite, {entry} {action}", total)
    print(f"  {time.monotonic() - started:.1f} s")
    figures.assert_clean()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize(
    ("entry", "action", "step"), [("cli", "upgrade", 2), ("library", "downgrade", 3)]
)
def test_postgres_kill_after_statements(
    crasher: Crasher, postgres_url: str, entry: str, action: str, step: int
) -> None:
    """PostgreSQL (a fresh schema per point, a sample of the points): the same guarantee."""
    started = time.monotonic()

    def fresh(k: int) -> tuple[str, str | None]:
        schema = f"mck_{uuid.uuid4().hex[:8]}_{k}"
        if action == "downgrade":
            migrate.upgrade(postgres_url, schema_name=schema)
            store = PostgreSQLStore(postgres_url, schema_name=schema, pool_min_size=0)
            try:
                store.save("ns", MemoryEntry(key="k", content={"kept": True}))
            finally:
                store.close()
        return postgres_url, schema

    def cleanup(url: str, schema: str | None) -> None:
        assert schema is not None
        drop_schema(url, schema)

    figures, total = _sweep(
        crasher, entry=entry, action=action, fresh=fresh, points=_every_nth(step), cleanup=cleanup
    )
    figures.report(f"postgresql, {entry} {action}", total)
    print(f"  {time.monotonic() - started:.1f} s")
    figures.assert_clean()
