"""``firefly-orm export --all`` / ``import`` carry users' knowledge graphs (issue 30), SQLite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cli_runner import run_cli

from firefly_orm.knowledge import KnowledgeGraph
from firefly_orm.manager import MemoryManager
from firefly_orm.sql import SQLiteStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _migrated(path: Path) -> list[str]:
    args = ["--url", f"sqlite:///{path}"]
    assert run_cli("migrate", *args).returncode == 0
    return args


def test_export_all_then_import_round_trips_the_graphs(tmp_path: Path) -> None:
    source_args = _migrated(tmp_path / "source.db")
    store = SQLiteStore(tmp_path / "source.db")
    try:
        MemoryManager(store=store).add_turn("c1", "user", "I moved to Berlin", user_id="ann")
        graph = KnowledgeGraph(store)
        for user in ("ann", "bob"):
            graph.add_fact(user, "user", "lives_in", "Berlin", evidence="c1:0", observed_at=T0)
        moved = T0 + timedelta(days=30)
        graph.add_fact("ann", "user", "lives_in", "Munich", evidence="c1:1", observed_at=moved)
        expected = {user: graph.export_user(user) for user in ("ann", "bob")}
    finally:
        store.close()
    out = tmp_path / "export.json"
    exported = run_cli("export", "--all", "-o", str(out), *source_args)
    assert exported.returncode == 0, exported.stderr
    assert "knowledge graphs of 2 user(s)" in exported.stderr
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["format_version"] == 3
    assert [g["user_id"] for g in document["knowledge"]] == ["ann", "bob"]

    # A file whose graph points at an unknown entity imports nothing, conversations included.
    broken = json.loads(json.dumps(document))
    broken["knowledge"][0]["facts"][0]["object_id"] = "nobody"
    (tmp_path / "broken.json").write_text(json.dumps(broken), encoding="utf-8")
    target_args = _migrated(tmp_path / "target.db")
    refused = run_cli("import", str(tmp_path / "broken.json"), *target_args)
    assert refused.returncode != 0 and "knowledge[0].facts[0]" in refused.stderr

    imported = run_cli("import", str(out), *target_args)
    assert imported.returncode == 0, imported.stderr
    target = SQLiteStore(tmp_path / "target.db")
    try:
        copy = KnowledgeGraph(target)
        assert {user: copy.export_user(user) for user in ("ann", "bob")} == expected
        (then,) = copy.facts_about("ann", "user", as_of=T0 + timedelta(days=1))
        assert (then.object, then.evidence, then.valid_to) == ("Berlin", ["c1:0"], moved)
        assert MemoryManager(store=target).conversation_exists("c1")
    finally:
        target.close()
    # Importing it again is refused as a whole: the graphs are there already.
    again = run_cli("import", str(out), *target_args)
    assert again.returncode != 0 and "already" in again.stderr
