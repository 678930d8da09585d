"""A user's conversations are an indexed read, on PostgreSQL and SQLite (issue 10).

``ConversationMemory.user_conversations`` reads the conversation index rows of
one user newest first; with many other users' rows in the table the plan must
walk ``ix_memory_entries_user`` (partial, ``user_id IS NOT NULL``), not scan.
The statement checked is the one the read ran, captured from the driver.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import describe_plan, drop_schema, plan_nodes

from firefly_orm.conversation import INDEX_NAMESPACE, ConversationMemory
from firefly_orm.conversation._rows import index_entry
from firefly_orm.entry import utcnow
from firefly_orm.sql import PostgreSQLStore, SQLiteStore

INDEX = "ix_memory_entries_user"
OTHER_USERS_ROWS = 20_000


def _captured(engine: sa.Engine, run: Any) -> tuple[Any, list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        if statement.lstrip().startswith("SELECT") and "user_id =" in statement:
            seen.append((statement, params))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        result = run()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert seen, "the read ran no SELECT filtered by user_id"
    return result, seen


@pytest.fixture
def schema(postgres_admin_engine: sa.Engine) -> Iterator[str]:
    name = "usr_" + uuid.uuid4().hex[:10]
    yield name
    drop_schema(postgres_admin_engine, name)


@pytest.mark.postgres
def test_postgres_plan_walks_the_user_index(
    postgres_url: str, postgres_admin_engine: sa.Engine, schema: str
) -> None:
    store = PostgreSQLStore(postgres_url, schema_name=schema, pool_min_size=0)
    store.initialize()
    try:
        with postgres_admin_engine.begin() as conn:
            conn.exec_driver_sql(
                f'INSERT INTO "{schema}".memory_entries (entry_id, namespace, scope, key, '
                "content, metadata, created_at, importance, version, user_id) "
                "SELECT md5(i::text), %(ns)s, 'conversation', 'c' || i, '{}'::jsonb, "
                "'{}'::jsonb, now(), 0.5, 1, 'user' || (i %% 2000) "
                f"FROM generate_series(1, {OTHER_USERS_ROWS}) AS i",
                {"ns": INDEX_NAMESPACE},
            )
            conn.exec_driver_sql(f'ANALYZE "{schema}".memory_entries')
        for cid in ("a1", "a2", "a3"):
            store.save(INDEX_NAMESPACE, index_entry(cid, "ann"))
        mem = ConversationMemory(store=store)
        ids, seen = _captured(store.engine, lambda: mem.user_conversations("ann"))
        assert ids == ["a3", "a2", "a1"]
        nodes = plan_nodes(postgres_admin_engine, *seen[0])
        plan = describe_plan(nodes)
        print(f"user_conversations plan over {OTHER_USERS_ROWS} other rows: {plan}")
        assert any(n.get("Index Name") == INDEX for n in nodes), plan
        assert not any(n["Node Type"] == "Seq Scan" for n in nodes), plan
    finally:
        store.close()


def test_sqlite_plan_uses_the_user_index(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "users.sqlite3")
    store.initialize()
    try:
        base = utcnow() - timedelta(hours=1)
        for n in range(300):
            row = index_entry(f"c{n}", f"user{n % 30}")
            store.save(INDEX_NAMESPACE, row.copy_entry(created_at=base + timedelta(seconds=n)))
        mem = ConversationMemory(store=store)
        ids, seen = _captured(store.engine, lambda: mem.user_conversations("user7", limit=3))
        assert ids == ["c277", "c247", "c217"]
        statement, params = seen[0]
        with store.engine.connect() as conn:
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
        plan = " | ".join(str(row[-1]) for row in rows)
        print(f"user_conversations plan: {plan}")
        assert INDEX in plan, plan
        assert "SCAN memory_entries" not in plan.replace(f"USING INDEX {INDEX}", ""), plan
    finally:
        store.close()
