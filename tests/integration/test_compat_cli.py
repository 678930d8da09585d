"""``firefly-orm import-upstream``: upstream data into a database from the CLI (issue 16).

The commands run in this process (``cli_runner.run_cli``: what the installed
script would return, without a Python process per call).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from cli_runner import run_cli as run
from helpers.upstream_layouts import sample_namespaces, write_file_store, write_sqlite_store

from firefly_orm.sql import SQLiteStore


def test_import_upstream_files_and_sqlite_then_rerun(tmp_path: Path) -> None:
    namespaces = sample_namespaces(datetime.now(UTC))
    live = sum(
        1
        for entries in namespaces.values()
        for e in entries
        if e.get("expires_at") is None or e["expires_at"] > datetime.now(UTC).isoformat()
    )
    upstream_dir = tmp_path / "upstream"
    write_file_store(upstream_dir, namespaces)
    db = tmp_path / "ours.sqlite3"
    url = f"sqlite:///{db}"
    assert run("migrate", "--url", url).returncode == 0

    first = run("import-upstream", str(upstream_dir), "--url", url, "--json")
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["namespaces_failed"] == 0
    assert summary["imported"] == live and summary["skipped_expired"] > 0

    store = SQLiteStore(db)
    try:
        # (upstream's FileStore wrote "/" in a namespace as "_": the summary names them)
        loaded = sum(len(store.load(r["namespace"])) for r in summary["results"])
    finally:
        store.close()
    assert loaded == live

    again = run("import-upstream", str(upstream_dir), "--url", url, "--json")
    assert again.returncode == 0, again.stderr
    rerun = json.loads(again.stdout)
    assert (rerun["imported"], rerun["already_present"]) == (0, live)

    upstream_db = tmp_path / "upstream.sqlite3"
    write_sqlite_store(upstream_db, namespaces)
    from_sqlite = run("import-upstream", str(upstream_db), "--url", url, "--json")
    assert from_sqlite.returncode == 0, from_sqlite.stderr
    counts = json.loads(from_sqlite.stdout)
    # the same entries (same ids) are not written twice; only the namespace upstream's
    # FileStore renamed ("/" -> "_") is new, as it keeps its real name in SQLite
    renamed = {r["namespace"] for r in summary["results"]} - set(namespaces)
    assert renamed and counts["imported"] + counts["already_present"] == live
    assert counts["imported"] == sum(
        r["imported"] for r in summary["results"] if r["namespace"] in renamed
    )


def test_import_upstream_refuses_a_missing_source(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ours.sqlite3'}"
    assert run("migrate", "--url", url).returncode == 0
    result = run("import-upstream", str(tmp_path / "nowhere"), "--url", url)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("firefly-orm: ") and "nothing imported" in result.stderr
