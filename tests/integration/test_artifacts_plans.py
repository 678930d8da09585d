"""Artifact reads are index walks, on PostgreSQL and SQLite (issue 12).

``list_paths(prefix)`` is ``list(files namespace, key_prefix=prefix)``: one
range ``namespace = ? AND key >= prefix AND key < next(prefix)`` that must be
served by ``ix_memory_entries_namespace_key`` (no schema change: the index
exists since the first migration).  ``history(path)`` is the same range over
the versions, ``audit_tail(n)`` the newest ``n`` rows of the audit namespace
by ``ix_memory_entries_namespace_created``.  With many rows in the same
namespaces (other paths) and in others, the plans of the statements the
reads ran (captured from the driver) must use those indexes and never scan
the table.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import describe_plan, drop_schema, plan_nodes

from firefly_orm.artifacts import Artifacts, ArtifactWorkspace
from firefly_orm.sql import PostgreSQLStore, SQLiteStore

KEY_INDEX = "ix_memory_entries_namespace_key"
TIME_INDEX = "ix_memory_entries_namespace_created"


def captured(engine: sa.Engine, run: Callable[[], Any]) -> tuple[Any, list[tuple[str, Any]]]:
    """``run()``'s result and the SELECTs on memory_entries it ran (statement, parameters)."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        if statement.lstrip().startswith("SELECT") and "memory_entries" in statement:
            seen.append((statement, params))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        result = run()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert seen, "the read ran no SELECT"
    return result, seen


def fill(ws: ArtifactWorkspace, other: ArtifactWorkspace, files: int) -> None:
    """``files`` files outside ``user/`` in ``ws`` and under it in ``other``."""
    for n in range(files):
        ws.write_text(f"notes/{n:05}.md", f"note {n}")
        other.write_text(f"user/{n:05}.md", f"other {n}")
    for n in range(3):
        ws.write_text(f"user/{n}.md", f"user {n}")
    for n in range(3):
        ws.write_text("notes/00001.md", f"again {n}")


def reads(ws: ArtifactWorkspace, engine: sa.Engine) -> dict[str, list[tuple[str, Any]]]:
    """The statements of ``list_paths``, ``history`` and ``audit_tail`` (checked results)."""
    paths, listing = captured(engine, lambda: ws.list_paths("user/"))
    assert paths == ["user/0.md", "user/1.md", "user/2.md"]
    history, versions = captured(engine, lambda: ws.history("notes/00001.md"))
    assert len(history) == 4
    tail, audit = captured(engine, lambda: ws.audit_tail(5))
    assert len(tail) == 5 and tail[-1].path == "notes/00001.md"
    return {"list_paths": listing, "history": versions, "audit_tail": audit}


@pytest.fixture
def schema(postgres_admin_engine: sa.Engine) -> Iterator[str]:
    name = "art_" + uuid.uuid4().hex[:10]
    yield name
    drop_schema(postgres_admin_engine, name)


@pytest.mark.postgres
def test_postgres_plans_walk_the_indexes(
    postgres_url: str, postgres_admin_engine: sa.Engine, schema: str
) -> None:
    store = PostgreSQLStore(postgres_url, schema_name=schema, pool_min_size=0)
    store.initialize()
    try:
        artifacts = Artifacts(store=store)
        ws = artifacts.create("plans", keep_versions=True)
        other = artifacts.create("other", keep_versions=True)
        fill(ws, other, 200)
        with postgres_admin_engine.begin() as conn:  # bulk rows in the same namespaces
            for namespace, prefix in (
                (ws.layout.files, "notes/bulk/"),
                (ws.layout.versions, "notes/bulk/"),
                (ws.layout.audit, "notes/bulk/"),
            ):
                conn.exec_driver_sql(
                    f'INSERT INTO "{schema}".memory_entries (entry_id, namespace, scope, key, '
                    "content, metadata, created_at, importance, version) "
                    "SELECT md5(%(ns)s || i::text), %(ns)s, 'working', %(prefix)s || i, "
                    "'{}'::jsonb, '{}'::jsonb, now() - interval '1 day', 0.5, 1 "
                    "FROM generate_series(1, 20000) AS i",
                    {"ns": namespace, "prefix": prefix},
                )
            conn.exec_driver_sql(f'ANALYZE "{schema}".memory_entries')
        for name, statements in reads(ws, store.engine).items():
            nodes = plan_nodes(postgres_admin_engine, *statements[0])
            plan = describe_plan(nodes)
            print(f"{name}: {plan}")
            wanted = TIME_INDEX if name == "audit_tail" else KEY_INDEX
            assert any(n.get("Index Name") == wanted for n in nodes), plan
            assert not any(n["Node Type"] == "Seq Scan" for n in nodes), plan
    finally:
        store.close()


def test_sqlite_plans_use_the_indexes(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "plans.sqlite3")
    store.initialize()
    try:
        artifacts = Artifacts(store=store)
        ws = artifacts.create("plans", keep_versions=True)
        other = artifacts.create("other", keep_versions=True)
        fill(ws, other, 200)
        for name, statements in reads(ws, store.engine).items():
            statement, params = statements[0]
            with store.engine.connect() as conn:
                rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
            plan = " | ".join(str(row[-1]) for row in rows)
            print(f"{name}: {plan}")
            wanted = TIME_INDEX if name == "audit_tail" else KEY_INDEX
            assert f"USING INDEX {wanted}" in plan, plan
            assert "SCAN memory_entries" not in plan.replace(f"USING INDEX {wanted}", ""), plan
            if name != "audit_tail":
                assert "(namespace=? AND key>? AND key<?)" in plan, plan
    finally:
        store.close()


def statements_of(engine: sa.Engine, run: Callable[[], Any]) -> list[str]:
    """The SQL statements ``run()`` sent (transaction control aside)."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        seen.append(" ".join(statement.split())[:60])

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        run()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    return seen


def test_sqlite_statement_counts(tmp_path: Path) -> None:
    """A write costs a fixed number of statements, whatever the workspace holds."""
    store = SQLiteStore(tmp_path / "counts.sqlite3")
    store.initialize()
    try:
        ws = Artifacts(store=store).create("counts")
        versioned = Artifacts(store=store).workspace("counts", keep_versions=True)
        for n in range(50):
            ws.write_text(f"f{n}.md", "x")
        sha = ws.current_sha("f1.md")
        counts = {
            "create": statements_of(store.engine, lambda: ws.write_text("new.md", "x")),
            "update": statements_of(
                store.engine, lambda: ws.write_text("f1.md", "y", expected_sha=sha)
            ),
            "versioned": statements_of(store.engine, lambda: versioned.write_text("f2.md", "y")),
            "delete": statements_of(store.engine, lambda: ws.delete("f3.md")),
            "read": statements_of(store.engine, lambda: ws.read("f4.md")),
        }
        print({name: len(found) for name, found in counts.items()})
        # head, file (by key), file write, audit row (+ version row); a new
        # path also moves the head's version on (conditional UPDATE)
        assert len(counts["create"]) == 5, counts["create"]
        assert counts["create"][-1].startswith("UPDATE"), counts["create"]
        assert len(counts["update"]) == 4, counts["update"]
        assert len(counts["versioned"]) == 5, counts["versioned"]
        # head, file, conditional touch, delete, audit row, head
        assert len(counts["delete"]) == 6, counts["delete"]
        assert len(counts["read"]) == 1, counts["read"]
    finally:
        store.close()
