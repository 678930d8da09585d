"""Hostile files given to the importers (issue 34, section 5: attacks 1, 2 and 3).

Each attack's one-line repro, as a test:

1. an ``import-upstream`` source holding a 100,000-deep ``[[[...`` value or a
   5,000-digit integer (a FileStore file, or a SQLite source's ``content``
   column) is one line naming the file or entry; that namespace is not written
   and its siblings are whole;
2. an upstream SQLite file defining ``firefly_memory`` as a recursive view
   finishes with a clear error (the view is refused; and were it not, the step
   budget stops the statement);
3. ``firefly-orm artifacts import`` of an export whose ``messages.json`` (or
   meta, audit or extra file) is 100,000 ``[`` deep is one line naming the file,
   nothing written (the per-file cases are in ``test_artifacts_flyte.py``'s table);

and the file-system findings: links out of (or inside) an upstream FileStore
directory are never followed, and links, dangling links and FIFOs are
reported as failed namespaces (exit status 2), never opened.

No timers: every hostile input must *finish* with the documented error.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli as run
from helpers.upstream_layouts import create_sqlite_table, upstream_entry, write_file_store

from firefly_orm._interop import _upstream_sources
from firefly_orm.artifacts import Artifacts
from firefly_orm.artifacts._flyte import DirectoryLayoutError, export_directory, read_directory
from firefly_orm.sql import SQLiteStore
from firefly_orm.upstream_import import (
    UpstreamFileSource,
    UpstreamReadError,
    UpstreamSourceError,
    UpstreamSQLiteSource,
    import_upstream,
)

NOW = datetime.now(UTC)
#: 100,000 levels of ``[`` (``json.loads`` raises RecursionError on it).
DEEP = "[" * 100_000 + "]" * 100_000
#: An integer of 5,000 digits (``int()`` refuses it by default: ValueError).
BIG = "9" * 5000
EXIT_USAGE = 2
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
needs_symlinks = pytest.mark.skipif(os.name == "nt", reason="symbolic links need privileges")


def one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The command failed with ``code`` and one ``firefly-orm:`` line, no traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("firefly-orm: ")
    return lines[0]


def migrated_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'target.sqlite3'}"
    migrated = run("migrate", "--url", url)
    assert migrated.returncode == 0, migrated.stderr
    return url


def loaded(url: str, namespace: str) -> list[str]:
    store = SQLiteStore(url.removeprefix("sqlite:///"))
    try:
        return [entry.entry_id for entry in store.load(namespace)]
    finally:
        store.close()


def raw_entry(entry_id: str, content_json: str) -> str:
    """An upstream entry's JSON text with ``content`` written verbatim."""
    entry = upstream_entry(created_at=NOW, entry_id=entry_id, content="placeholder")
    return json.dumps(entry).replace('"placeholder"', content_json)


# --------------------------------------------------------------------------- attack 1: FileStore


#: The deep FileStore file: ``{"d1": <entry whose content is DEEP>}``.
DEEP_FILE = '{"d1": ' + raw_entry("d1", DEEP) + "}"
#: Where it goes past 256 levels: the 255th ``[`` (the file and the entry are two).
DEEP_FILE_COLUMN = DEEP_FILE.index("[") + 255


def hostile_file_store(tmp_path: Path) -> Path:
    """A FileStore directory: one good namespace beside a deep and a big-integer one."""
    base = tmp_path / "upstream"
    write_file_store(base, {"good": [upstream_entry(created_at=NOW, entry_id="g1", content=1)]})
    (base / "deep.json").write_text(DEEP_FILE, "utf-8")
    (base / "big.json").write_text('{"b1": ' + raw_entry("b1", BIG) + "}", "utf-8")
    return base


def test_file_source_deep_and_big_values_fail_their_namespace_only(
    store: Any, tmp_path: Path
) -> None:
    summary = import_upstream(UpstreamFileSource(hostile_file_store(tmp_path)), store)
    results = {r.namespace: r for r in summary.results}
    assert (results["good"].failed, results["good"].imported) == (False, 1)
    assert results["deep"].failed and results["big"].failed and not summary.ok
    (deep,) = results["deep"].issues
    assert (deep.where, deep.message) == (
        "file deep.json",
        f"is nested too deeply (more than 256 levels; line 1, column {DEEP_FILE_COLUMN}, "
        "under key 'd1')",
    )
    (big,) = results["big"].issues
    assert (big.where, big.message) == (
        "file big.json",
        "holds an integer of 5000 digits (at most 4300 are read)",
    )
    assert [e.entry_id for e in store.load("good")] == ["g1"]
    assert store.load("deep") == [] and store.load("big") == []


def test_cli_file_source_reports_each_hostile_file_in_one_line(tmp_path: Path) -> None:
    url = migrated_url(tmp_path)
    result = run("import-upstream", str(hostile_file_store(tmp_path)), "--url", url)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "Traceback" not in result.stderr and result.stderr == ""
    lines = result.stdout.strip().splitlines()
    assert lines[1:] == [
        "  big: file big.json: holds an integer of 5000 digits (at most 4300 are read)",
        "  deep: file deep.json: is nested too deeply (more than 256 levels; "
        f"line 1, column {DEEP_FILE_COLUMN}, under key 'd1')",
    ]
    assert "1 entries imported" in lines[0] and "2 namespace(s) failed" in lines[0]
    assert loaded(url, "good") == ["g1"]
    assert loaded(url, "deep") == loaded(url, "big") == []


# --------------------------------------------------------------------------- attack 1: SQLite


def hostile_sqlite(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    conn = create_sqlite_table(path)
    with conn:
        conn.executemany("INSERT INTO firefly_memory VALUES (?, ?, ?)", rows)
    conn.close()
    return path


def sqlite_rows() -> list[tuple[str, str, str]]:
    good = json.dumps(upstream_entry(created_at=NOW, entry_id="g1", content="fine"))
    kept = json.dumps(upstream_entry(created_at=NOW, entry_id="k1", content="kept"))
    return [
        ("g1", "good", good),
        ("k1", "mixed", kept),
        ("d1", "mixed", raw_entry("d1", DEEP)),
        ("b1", "mixed", raw_entry("b1", BIG)),
    ]


def test_sqlite_content_deep_and_big_values_are_named_by_entry(store: Any, tmp_path: Path) -> None:
    source = UpstreamSQLiteSource(hostile_sqlite(tmp_path / "up.db", sqlite_rows()))
    summary = import_upstream(source, store)
    results = {r.namespace: r for r in summary.results}
    assert (results["good"].failed, results["good"].imported) == (False, 1)
    assert results["mixed"].failed and results["mixed"].imported == 0
    assert [(i.where, i.message) for i in results["mixed"].issues] == [
        (
            "entry 'd1'",
            "content is nested too deeply (more than 256 levels; "
            f"line 1, column {raw_entry('d1', DEEP).index('[') + 256}, under key 'content')",
        ),
        ("entry 'b1'", "content holds an integer of 5000 digits (at most 4300 are read)"),
    ]
    assert store.load("mixed") == []
    # skip_invalid: the namespace's valid entry goes in, the two are reported
    again = import_upstream(source, store, skip_invalid=True)
    mixed = {r.namespace: r for r in again.results}["mixed"]
    assert (mixed.failed, mixed.imported, mixed.skipped_invalid) == (False, 1, 2)
    assert [e.entry_id for e in store.load("mixed")] == ["k1"]


def test_cli_sqlite_source_with_a_deep_content_column(tmp_path: Path) -> None:
    url = migrated_url(tmp_path)
    up = hostile_sqlite(tmp_path / "up.db", sqlite_rows())
    result = run("import-upstream", str(up), "--url", url, "--json")
    assert result.returncode == EXIT_USAGE and "Traceback" not in result.stderr
    summary = json.loads(result.stdout)
    assert summary["imported"] == 1 and summary["namespaces_failed"] == 1
    (mixed,) = [r for r in summary["results"] if r["failed"]]
    assert [i["where"] for i in mixed["issues"]] == ["entry 'd1'", "entry 'b1'"]
    assert loaded(url, "good") == ["g1"] and loaded(url, "mixed") == []


# --------------------------------------------------------------------------- attack 2


def recursive_view_db(path: Path) -> Path:
    """``firefly_memory`` as a view over a recursive CTE that never ends."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE VIEW firefly_memory(entry_id, namespace, content) AS "
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
            "SELECT n, 'ns' || n, '{}' FROM r"
        )
    conn.close()
    return path


def test_cli_recursive_view_is_refused_not_run(tmp_path: Path) -> None:
    url = migrated_url(tmp_path)
    result = run("import-upstream", str(recursive_view_db(tmp_path / "up.db")), "--url", url)
    line = one_line_error(result, EXIT_USAGE)
    assert "firefly_memory is a view, not a table" in line and "nothing imported" in line


def test_recursive_view_is_refused_by_read_too(tmp_path: Path) -> None:
    source = UpstreamSQLiteSource(recursive_view_db(tmp_path / "up.db"))
    with pytest.raises(UpstreamSourceError, match="is a view"):
        source.namespaces()
    with pytest.raises(UpstreamReadError, match="is a view"):
        source.read("ns1")


def test_step_budget_stops_a_statement_that_would_not_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were a looping schema to get past the table check, the step budget stops it."""
    source = UpstreamSQLiteSource(recursive_view_db(tmp_path / "up.db"))
    monkeypatch.setattr(UpstreamSQLiteSource, "_check_table", lambda *args: None)
    monkeypatch.setattr(_upstream_sources, "_SQLITE_STEP_BASE", 1_000_000)
    with pytest.raises(UpstreamSourceError, match=r"stopped after 1\d{6} SQLite steps"):
        source.namespaces()
    with pytest.raises(UpstreamReadError, match="stopped after"):
        source.read("ns1")


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (
            "CREATE TABLE firefly_memory (entry_id TEXT, namespace TEXT, "
            "raw TEXT, content TEXT GENERATED ALWAYS AS (raw || raw) VIRTUAL)",
            r"column\(s\) content of firefly_memory are computed",
        ),
        (
            "CREATE VIRTUAL TABLE firefly_memory USING fts5(entry_id, namespace, content)",
            "is a virtual table",
        ),
        ("CREATE TABLE firefly_memory (entry_id TEXT, content TEXT)", "no table firefly_memory"),
    ],
    ids=["generated-column", "virtual-table", "missing-column"],
)
def test_tables_that_are_not_plain_are_refused(tmp_path: Path, schema: str, expected: str) -> None:
    path = tmp_path / "up.db"
    try:
        with sqlite3.connect(path) as conn:
            conn.execute(schema)
        conn.close()
    except sqlite3.OperationalError as exc:  # pragma: no cover - an SQLite without FTS5
        pytest.skip(f"this SQLite cannot build the table: {exc}")
    with pytest.raises(UpstreamSourceError, match=expected):
        UpstreamSQLiteSource(path).namespaces()


# --------------------------------------------------------------------------- file-system findings


@needs_symlinks
@needs_fifo
def test_links_and_fifos_are_reported_never_followed_or_opened(store: Any, tmp_path: Path) -> None:
    base = tmp_path / "upstream"
    outside = tmp_path / "outside"
    write_file_store(outside, {"secret": [upstream_entry(created_at=NOW, entry_id="s1")]})
    write_file_store(base, {"good": [upstream_entry(created_at=NOW, entry_id="g1")]})
    (base / "out.json").symlink_to(outside / "secret.json")  # out of the directory
    (base / "alias.json").symlink_to("good.json")  # inside it
    (base / "dangling.json").symlink_to("nowhere.json")
    os.mkfifo(base / "pipe.json")  # opening it for reading would block
    summary = import_upstream(UpstreamFileSource(base), store)
    assert [(r.namespace, r.failed) for r in summary.results] == [
        ("alias", True),
        ("dangling", True),
        ("good", False),
        ("out", True),
        ("pipe", True),
    ]
    messages = {i.namespace: i.message for i in summary.issues}
    assert messages["alias"] == (
        "is a symbolic link (to 'good.json'), not followed; only regular files are read"
    )
    assert messages["dangling"].startswith("is a symbolic link (to 'nowhere.json', dangling)")
    assert (
        messages["out"].startswith("is a symbolic link (to ") and "not followed" in messages["out"]
    )
    assert messages["pipe"] == "is a FIFO; only regular files are read"
    assert [e.entry_id for e in store.load("good")] == ["g1"]
    for namespace in ("alias", "out", "dangling", "pipe", "secret"):
        assert store.load(namespace) == []


@needs_symlinks
@needs_fifo
def test_cli_reports_links_and_fifos_with_a_failing_status(tmp_path: Path) -> None:
    url = migrated_url(tmp_path)
    base = tmp_path / "upstream"
    write_file_store(base, {"good": [upstream_entry(created_at=NOW, entry_id="g1")]})
    (base / "passwd.json").symlink_to("/etc/passwd")
    os.mkfifo(base / "pipe.json")
    result = run("import-upstream", str(base), "--url", url)
    assert result.returncode == EXIT_USAGE, result.stderr
    issues = result.stdout.strip().splitlines()[1:]
    assert issues == [
        "  passwd: file passwd.json: is a symbolic link (to '/etc/passwd'), not followed; "
        "only regular files are read",
        "  pipe: file pipe.json: is a FIFO; only regular files are read",
    ]
    assert loaded(url, "good") == ["g1"]


# --------------------------------------------------------------------------- attack 3


def test_cli_artifacts_import_of_a_deep_messages_file(tmp_path: Path) -> None:
    url = migrated_url(tmp_path)
    store = SQLiteStore(tmp_path / "seed.sqlite3")
    try:
        ws = Artifacts(store=store).create("seed")
        ws.write_text("notes.md", "hello")
        ws.append({"role": "user", "content": "hi"})
        export_directory(ws, tmp_path / "export")
    finally:
        store.close()
    (tmp_path / "export" / "messages.json").write_text(DEEP, "utf-8")
    refused = run("artifacts", "import", str(tmp_path / "export"), "--url", url)
    line = one_line_error(refused, EXIT_USAGE)
    assert "messages.json: is nested too deeply (more than 256 levels" in line
    assert line.endswith("nothing imported")
    with pytest.raises(DirectoryLayoutError, match=r"^messages\.json: is nested too deeply"):
        read_directory(tmp_path / "export")
    target = SQLiteStore(url.removeprefix("sqlite:///"))
    try:
        assert Artifacts(store=target).exists("seed") is False
    finally:
        target.close()


def test_names_cannot_forge_report_lines(tmp_path: Path) -> None:
    """A file name with a newline or a terminal escape is shown escaped, one line per issue."""
    url = migrated_url(tmp_path)
    base = tmp_path / "upstream"
    base.mkdir()
    (base / "a\nFAKE: 0 failed\x1b[31m.json").write_text("[", "utf-8")
    result = run("import-upstream", str(base), "--url", url)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "\x1b" not in result.stdout
    assert result.stdout.strip().splitlines()[1:] == [
        "  a\\nFAKE: 0 failed\\x1b[31m: file a\\nFAKE: 0 failed\\x1b[31m.json: "
        "is not JSON (Expecting value: line 1 column 2 (char 1))"
    ]
    as_json = run("import-upstream", str(base), "--url", url, "--json")
    (failed,) = json.loads(as_json.stdout)["results"]
    assert failed["namespace"] == "a\nFAKE: 0 failed\x1b[31m"  # the data, exactly


@needs_fifo
def test_a_fifo_given_as_the_source_is_refused_not_opened(tmp_path: Path) -> None:
    url = migrated_url(tmp_path)
    os.mkfifo(tmp_path / "up.db")
    result = run("import-upstream", str(tmp_path / "up.db"), "--url", url)
    line = one_line_error(result, EXIT_USAGE)
    assert "is a FIFO, neither an upstream FileStore directory nor a SQLite database" in line


@pytest.mark.parametrize(
    ("body", "expected"),
    [(DEEP, "is nested too deeply"), ("[" + BIG + "]", "integer of 5000 digits")],
    ids=["100000-deep", "5000-digits"],
)
def test_json_kind_file_of_an_export_is_bounded_too(
    tmp_path: Path, body: str, expected: str
) -> None:
    """A file the extra file calls ``json``, its meta and sha made to match: still one line."""
    store = SQLiteStore(tmp_path / "seed.sqlite3")
    try:
        ws = Artifacts(store=store).create("seed")
        ws.write_json("d.json", {"a": 1})
        export_directory(ws, tmp_path / "export")
        data = body.encode()
        ws.write_text("deep.txt", body)  # a text file may hold anything
        with pytest.raises(ValueError, match=expected):
            ws.read_json("deep.txt")
    finally:
        store.close()
    root = tmp_path / "export"
    sha = hashlib.sha256(data).hexdigest()
    (root / "d.json").write_bytes(data)
    meta = json.loads((root / "meta" / "d.json.json").read_text())
    (root / "meta" / "d.json.json").write_text(
        json.dumps({**meta, "sha256": sha, "bytes": len(data)})
    )
    sidecar = json.loads((root / "meta" / "@workspace.json").read_text())
    sidecar["files"]["d.json"]["sha256"] = sha
    (root / "meta" / "@workspace.json").write_text(json.dumps(sidecar))
    with pytest.raises(
        DirectoryLayoutError, match=f"^d\\.json: a json file must hold JSON .*{expected}"
    ):
        read_directory(root)
