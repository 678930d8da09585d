"""A large conversation import refreshes PostgreSQL's planner statistics (issue 17, item 10).

Without statistics the planner guesses that a conversation holds a row or two;
on a big table it then reads every row of the conversation and sorts them to
serve a history read (a bitmap heap scan plus a sort) instead of walking the
``(namespace, key, ...)`` index backwards, until autovacuum gets round to
analyzing the table.  The checks are deterministic proxies, no timing:

* the catalog: ``pg_stat_user_tables.last_analyze``, ``pg_class.reltuples``,
  ``pg_stats`` rows for our table;
* ``EXPLAIN`` of the very statement the history read ran (captured from the
  driver): an index scan, no sort.

SQLite needs no statistics for our reads: its plan is checked too, and the
store leaves it alone.

Each table gets ``autovacuum_enabled = false`` so autovacuum cannot analyze
it behind the test's back, and :data:`FILLER_ROWS` rows in other namespaces
written with plain SQL: rows the planner has never seen (as after any burst
of writes autovacuum has not reached yet), so that the table is big enough
for the blind plan to go wrong with a 5,000-turn import (without them it
takes some 50,000 imported turns).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import describe_plan as _describe
from dbutil import drop_schema
from dbutil import plan_nodes as _plan_nodes
from sqlalchemy.orm import Session

from firefly_orm.conversation import ConversationMemory
from firefly_orm.conversation._transfer import ANALYZE_AFTER_ROWS
from firefly_orm.sql import PostgreSQLStore, SQLiteStore

postgres = pytest.mark.postgres

TURNS = 5_000
FILLER_ROWS = 30_000
INDEX = "ix_memory_entries_namespace_key"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def schema(postgres_admin_engine: sa.Engine) -> Iterator[str]:
    name = "an_" + uuid.uuid4().hex[:10]
    yield name
    drop_schema(postgres_admin_engine, name)


@pytest.fixture
def store(postgres_url: str, postgres_admin_engine: sa.Engine, schema: str) -> Iterator[Any]:
    """A migrated store in its own schema, autovacuum off for its table."""
    opened = PostgreSQLStore(postgres_url, schema_name=schema, pool_min_size=0)
    opened.initialize()
    with postgres_admin_engine.begin() as conn:
        conn.exec_driver_sql(
            f'ALTER TABLE "{schema}".memory_entries SET (autovacuum_enabled = false)'
        )
    yield opened
    opened.close()


def _add_filler(admin: sa.Engine, schema: str) -> None:
    """FILLER_ROWS rows of 50 other namespaces, ~2 kB each, written with plain SQL."""
    with admin.begin() as conn:
        conn.exec_driver_sql(
            f'INSERT INTO "{schema}".memory_entries (entry_id, namespace, scope, key, content, '
            "metadata, created_at, importance, version) "
            "SELECT md5(i::text), 'filler:' || (i %% 50), 'long_term', 'k' || i, "
            "jsonb_build_object('text', repeat('x', 1800)), '{}'::jsonb, now(), 0.5, 1 "
            f"FROM generate_series(1, {FILLER_ROWS}) AS i"
        )


def _turns(n: int) -> list[dict[str, Any]]:
    return [
        {
            "user_prompt": f"question {i} " * 10,
            "assistant_response": "an answer " * 20,
            "raw_messages": [{"role": "user", "content": f"question {i}"}],
        }
        for i in range(n)
    ]


# --------------------------------------------------------------------------- catalog and plans


def _statistics(admin: sa.Engine, schema: str) -> dict[str, Any]:
    """What the catalog says about our table's statistics."""
    with admin.connect() as conn:
        analyzed = conn.execute(
            sa.text(
                "SELECT last_analyze, analyze_count FROM pg_stat_user_tables "
                "WHERE schemaname = :s AND relname = 'memory_entries'"
            ),
            {"s": schema},
        ).one()
        reltuples = conn.execute(
            sa.text(
                "SELECT c.reltuples FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :s AND c.relname = 'memory_entries'"
            ),
            {"s": schema},
        ).scalar_one()
        columns = set(
            conn.execute(
                sa.text(
                    "SELECT attname FROM pg_stats "
                    "WHERE schemaname = :s AND tablename = 'memory_entries'"
                ),
                {"s": schema},
            ).scalars()
        )
        rows = conn.execute(sa.text(f'SELECT count(*) FROM "{schema}".memory_entries')).scalar_one()
    return {
        "last_analyze": analyzed.last_analyze,
        "analyze_count": analyzed.analyze_count,
        "reltuples": float(reltuples),
        "pg_stats_columns": columns,
        "rows": rows,
    }


@contextmanager
def _captured_reads(engine: sa.Engine, table: str) -> Iterator[list[tuple[str, Any]]]:
    """The SELECTs of ``table``'s contents the driver runs meanwhile (text, parameters)."""
    seen: list[tuple[str, Any]] = []

    def record(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        columns = statement.split("FROM", 1)[0].split()
        if columns[0] == "SELECT" and columns[1:] == [f"{table}.content"]:
            seen.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def _history_plan(
    admin: sa.Engine, engine: sa.Engine, schema: str, read: Any
) -> tuple[list[dict[str, Any]], list[Any]]:
    with _captured_reads(engine, f"{schema}.memory_entries") as reads:
        history = read()
    assert reads, "the history read ran no SELECT of turn contents"
    statement, parameters = reads[0]
    return _plan_nodes(admin, statement, parameters), history


# --------------------------------------------------------------------------- tests


@postgres
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_large_import_leaves_the_planner_statistics_and_an_index_plan(
    store: Any, postgres_admin_engine: sa.Engine, schema: str, mode: str
) -> None:
    _add_filler(postgres_admin_engine, schema)
    mem = ConversationMemory(store=store, max_tokens=2_000)
    items = [{"conversation_id": "big", "turns": _turns(TURNS)}]
    if mode == "sync":
        assert mem.import_conversations(items) == ["big"]
        engine = store.engine

        def read() -> list[Any]:
            return mem.get_message_history("big")
    else:
        assert asyncio.run(mem.async_import_conversations(items)) == ["big"]
        engine = store.async_engine.sync_engine

        def read() -> list[Any]:
            return asyncio.run(mem.async_get_message_history("big"))

    stats = _statistics(postgres_admin_engine, schema)
    nodes, history = _history_plan(postgres_admin_engine, engine, schema, read)
    print(
        f"{mode}: {TURNS} turns imported beside {FILLER_ROWS} filler rows; "
        f"analyze_count={stats['analyze_count']}, reltuples={stats['reltuples']:.0f} "
        f"of {stats['rows']} rows; history plan: {_describe(nodes)}"
    )
    assert history  # the read itself works
    # Before the fix: Limit > Sort > Bitmap Heap Scan (every turn) > Bitmap Index Scan.
    types = [node["Node Type"] for node in nodes]
    assert "Sort" not in types and "Bitmap Heap Scan" not in types and "Seq Scan" not in types
    scans = [node for node in nodes if node["Node Type"] in ("Index Scan", "Index Only Scan")]
    assert [(s.get("Index Name"), s.get("Scan Direction")) for s in scans] == [(INDEX, "Backward")]
    assert stats["last_analyze"] is not None and stats["analyze_count"] == 1
    assert stats["reltuples"] >= 0.9 * stats["rows"]  # -1 (never analyzed) before the fix
    assert {"namespace", "key", "created_at"} <= stats["pg_stats_columns"]


@postgres
def test_import_conversation_of_one_large_conversation_also_analyzes(
    store: Any, postgres_admin_engine: sa.Engine, schema: str
) -> None:
    mem = ConversationMemory(store=store)
    mem.import_conversation({"conversation_id": "one", "turns": _turns(ANALYZE_AFTER_ROWS)})
    assert _statistics(postgres_admin_engine, schema)["analyze_count"] == 1


@postgres
def test_a_small_import_leaves_it_to_autovacuum(
    store: Any, postgres_admin_engine: sa.Engine, schema: str
) -> None:
    mem = ConversationMemory(store=store)
    mem.import_conversations(
        [
            {"conversation_id": "a", "turns": _turns(ANALYZE_AFTER_ROWS // 2)},
            {"conversation_id": "b", "turns": _turns(ANALYZE_AFTER_ROWS // 2 - 1)},
        ]
    )
    stats = _statistics(postgres_admin_engine, schema)
    assert stats["last_analyze"] is None and stats["analyze_count"] == 0
    assert stats["rows"] >= ANALYZE_AFTER_ROWS - 1


@postgres
def test_store_analyze_runs_in_its_own_transaction(
    store: Any, postgres_admin_engine: sa.Engine, schema: str
) -> None:
    assert store.analyze() is True
    assert asyncio.run(store.async_analyze()) is True
    stats = _statistics(postgres_admin_engine, schema)
    assert stats["analyze_count"] == 2 and stats["reltuples"] == 0  # an empty table, analyzed


@postgres
def test_a_session_bound_import_runs_no_analyze_in_the_callers_transaction(
    store: Any, postgres_admin_engine: sa.Engine, schema: str
) -> None:
    with _statements(store.engine) as statements, Session(store.engine) as session:
        mem = ConversationMemory(store=store.bind_session(session))
        mem.import_conversations([{"conversation_id": "s", "turns": _turns(ANALYZE_AFTER_ROWS)}])
        session.commit()
    assert not [s for s in statements if "ANALYZE" in s.upper()]
    assert any(s.startswith("SAVEPOINT") for s in statements)  # it did run in the session
    stats = _statistics(postgres_admin_engine, schema)
    assert stats["analyze_count"] == 0 and stats["rows"] >= ANALYZE_AFTER_ROWS


@contextmanager
def _statements(engine: sa.Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


# --------------------------------------------------------------------------- least privilege


@pytest.fixture
def dml_role(postgres_admin_engine: sa.Engine, store: Any, schema: str) -> Iterator[str]:
    """A LOGIN role with the README's application grants: rows only, not the table's owner."""
    role = "an_app_" + uuid.uuid4().hex[:8]
    with postgres_admin_engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
        conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        conn.exec_driver_sql(
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"'
        )
    try:
        yield role
    finally:
        drop_schema(postgres_admin_engine, schema)
        with postgres_admin_engine.begin() as conn:
            conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
            conn.exec_driver_sql(f'DROP ROLE "{role}"')


@postgres
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_role_that_may_not_analyze_still_imports(
    postgres_url: str,
    postgres_admin_engine: sa.Engine,
    schema: str,
    dml_role: str,
    mode: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = sa.engine.make_url(postgres_url).set(username=dml_role, password=None)
    app = PostgreSQLStore(url, schema_name=schema, pool_min_size=0)
    try:
        app.initialize(migrate=False)
        mem = ConversationMemory(store=app)
        items = [{"conversation_id": "app", "turns": _turns(ANALYZE_AFTER_ROWS)}]
        with caplog.at_level(logging.WARNING, logger="firefly_orm"):
            if mode == "sync":
                assert mem.import_conversations(items) == ["app"]
                assert app.analyze() is False
            else:
                assert asyncio.run(mem.async_import_conversations(items)) == ["app"]
                assert asyncio.run(app.async_analyze()) is False
        assert len(mem.get_turns("app")) == ANALYZE_AFTER_ROWS
    finally:
        app.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    print(f"{mode}: {warnings[0] if warnings else 'no warning'}")
    assert len(warnings) == 2  # the import's ANALYZE and the explicit one
    assert all("skipped by the server" in w and "memory_entries" in w for w in warnings)
    stats = _statistics(postgres_admin_engine, schema)
    assert stats["analyze_count"] == 0


# --------------------------------------------------------------------------- SQLite


def test_sqlite_plans_the_history_read_on_the_index_without_statistics(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "memory.sqlite3")
    try:
        mem = ConversationMemory(store=store, max_tokens=2_000)
        mem.import_conversations([{"conversation_id": "big", "turns": _turns(TURNS)}])
        assert store.analyze() is False
        assert asyncio.run(store.async_analyze()) is False
        with _captured_reads(store.engine, "memory_entries") as reads:
            assert mem.get_message_history("big")
        statement, parameters = reads[0]
        with store.engine.connect() as conn:
            plan = [
                row[-1]
                for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
            ]
            tables = set(conn.exec_driver_sql("SELECT name FROM sqlite_master").scalars())
    finally:
        store.close()
    print(f"sqlite: {TURNS} turns imported; history plan: {plan}")
    assert "sqlite_stat1" not in tables  # no ANALYZE ran
    assert len(plan) == 1 and f"USING INDEX {INDEX} " in plan[0]  # no temporary B-tree sort
