"""A user's conversation list pages through an index, on SQLite and PostgreSQL (issue 32).

``ConversationMemory.list_conversations`` is a keyset page over the heads'
partial indexes of migration 0009.  With thousands of other users' heads and
thousands of the user's own, a page deep in the list must walk the index from
the cursor: no sort, no scan, and on PostgreSQL (``EXPLAIN ANALYZE``) at most
``limit + 1`` index entries read, the same as the first page.  The statement
checked is the one the read ran, captured from the driver.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import drop_schema

from firefly_orm import migrate
from firefly_orm.conversation import ConversationMemory
from firefly_orm.sql import PostgreSQLStore, SQLiteStore

UPDATED = "ix_memory_entries_conv_updated"
CREATED = "ix_memory_entries_conv_created"
USERS, MINE = 400, 3000  # heads of other users (10 each), heads of the listing user


BEFORE = "0008_knowledge_graph"


def _listing_indexes(url: str, schema: str | None) -> set[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                query = "SELECT name FROM sqlite_master WHERE type = 'index'"
                names = set(conn.exec_driver_sql(query).scalars())
            else:
                query = "SELECT indexname FROM pg_indexes WHERE schemaname = %(s)s"
                names = set(conn.exec_driver_sql(query, {"s": schema}).scalars())
    finally:
        engine.dispose()
    return names & {UPDATED, CREATED}


def _round_trip(url: str, schema: str | None) -> None:
    # SQLite gets no JSON expression index (see migration 0009's docstring)
    expected = {CREATED} if url.startswith("sqlite") else {UPDATED, CREATED}
    migrate.upgrade(url, schema_name=schema)
    assert _listing_indexes(url, schema) == expected
    migrate.downgrade(url, BEFORE, schema_name=schema)
    assert _listing_indexes(url, schema) == set()
    assert migrate.current(url, schema_name=schema) == BEFORE
    migrate.upgrade(url, schema_name=schema)
    assert _listing_indexes(url, schema) == expected
    assert migrate.current(url, schema_name=schema) == migrate.head()


def test_sqlite_migration_0009_upgrade_and_downgrade(tmp_path: Path) -> None:
    _round_trip(f"sqlite:///{tmp_path / 'm.sqlite3'}", None)


def test_sqlite_schema_stays_readable_without_trusted_schema(tmp_path: Path) -> None:
    """No JSON function in the SQLite schema: a hardened connection still reads the file."""
    path = tmp_path / "hardened.sqlite3"
    migrate.upgrade(f"sqlite:///{path}")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute("PRAGMA trusted_schema = OFF")
        assert conn.execute("SELECT count(*) FROM memory_entries").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
    finally:
        conn.close()


@pytest.mark.postgres
def test_postgres_migration_0009_upgrade_and_downgrade(postgres_url: str, schema: str) -> None:
    _round_trip(postgres_url, schema)


def _captured(engine: sa.Engine, run: Any) -> tuple[Any, tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        if statement.lstrip().startswith("SELECT") and "namespace LIKE" in statement:
            seen.append((statement, params))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        result = run()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert len(seen) == 1, seen
    return result, seen[0]


def _deep_page(mem: ConversationMemory, order: str) -> tuple[str, Any]:
    """The cursor ten pages in, then the statement of the next page."""
    cursor = None
    for _ in range(10):
        cursor = mem.list_conversations("ann", limit=20, order=order, cursor=cursor).next_cursor
    page, seen = _captured(
        mem.store.engine,  # type: ignore[attr-defined]
        lambda: mem.list_conversations("ann", limit=20, order=order, cursor=cursor),
    )
    assert len(page.items) == 20 and page.next_cursor is not None
    stamps = [i.updated_at if order.startswith("updated") else i.created_at for i in page.items]
    assert stamps == sorted(stamps, reverse=order.endswith("desc"))
    return seen


_SQLITE_HEADS = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
INSERT INTO memory_entries (entry_id, namespace, scope, key, content, metadata, created_at,
    importance, version, user_id)
SELECT lower(hex(randomblob(16))), 'conversation:' || :prefix || i, 'conversation', 'head',
    json_object('conversation_id', :prefix || i, 'next_turn_id', 1, 'total_tokens', 3,
        'turn_count', 1, 'summary', NULL, 'total_messages', 2,
        'updated_at', strftime('%Y-%m-%dT%H:%M:%f000Z', 'now', '-' || i || ' seconds')),
    '{}', datetime('now', '-' || (i * 7 % :count) || ' seconds'), 0.5, 1,
    CASE WHEN :user IS NULL THEN 'user' || (i % 400) ELSE :user END
FROM n
"""


def test_sqlite_pages_walk_the_listing_indexes(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "list.sqlite3")
    store.initialize()
    try:
        with store.engine.begin() as conn:
            conn.execute(sa.text(_SQLITE_HEADS), {"count": USERS * 10, "prefix": "o", "user": None})
            conn.execute(sa.text(_SQLITE_HEADS), {"count": MINE, "prefix": "a", "user": "ann"})
            conn.exec_driver_sql("ANALYZE")
        mem = ConversationMemory(store=store)
        for order, index, seek in (("created_asc", CREATED, "created_at>?"),):
            statement, params = _deep_page(mem, order)
            with store.engine.connect() as conn:
                rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
            plan = " | ".join(str(row[-1]) for row in rows)
            print(f"list_conversations {order} plan: {plan}")
            assert f"USING INDEX {index}" in plan, plan
            assert "TEMP B-TREE" not in plan, plan  # the index gives the order: no sort
            assert seek in plan, plan  # it seeks to the cursor, not reads up to it
    finally:
        store.close()


_PG_HEADS = """
INSERT INTO "{schema}".memory_entries (entry_id, namespace, scope, key, content, metadata,
    created_at, importance, version, user_id)
SELECT md5(%(prefix)s || i), 'conversation:' || %(prefix)s || i, 'conversation', 'head',
    jsonb_build_object('conversation_id', %(prefix)s || i, 'next_turn_id', 1,
        'total_tokens', 3, 'turn_count', 1, 'summary', NULL, 'total_messages', 2,
        'updated_at', to_char((now() - i * interval '1 second') AT TIME ZONE 'UTC',
            'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
    '{{}}'::jsonb, now() - (i * 7 %% %(count)s) * interval '1 second', 0.5, 1,
    coalesce(%(user)s, 'user' || (i %% 400))
FROM generate_series(1, %(count)s) AS i
"""


@pytest.fixture
def schema(postgres_admin_engine: sa.Engine) -> Iterator[str]:
    name = "lst_" + uuid.uuid4().hex[:10]
    yield name
    drop_schema(postgres_admin_engine, name)


def _analyzed(engine: sa.Engine, statement: str, params: Any) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        plan = conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params
        ).scalar_one()
    nodes: list[dict[str, Any]] = []
    pending = [plan[0]["Plan"]]
    while pending:
        node = pending.pop(0)
        nodes.append(node)
        pending.extend(node.get("Plans", []))
    return nodes


@pytest.mark.postgres
def test_postgres_pages_read_limit_plus_one_index_entries(
    postgres_url: str, postgres_admin_engine: sa.Engine, schema: str
) -> None:
    store = PostgreSQLStore(postgres_url, schema_name=schema, pool_min_size=0)
    store.initialize()
    try:
        with postgres_admin_engine.begin() as conn:
            heads = _PG_HEADS.format(schema=schema)
            conn.exec_driver_sql(heads, {"count": USERS * 10, "prefix": "o", "user": None})
            conn.exec_driver_sql(heads, {"count": MINE, "prefix": "a", "user": "ann"})
            conn.exec_driver_sql(f'ANALYZE "{schema}".memory_entries')
        mem = ConversationMemory(store=store)
        for order, index in (("updated_desc", UPDATED), ("created_asc", CREATED)):
            statement, params = _deep_page(mem, order)
            assert f"{schema}.memory_entries" in statement  # the store's schema
            nodes = _analyzed(postgres_admin_engine, statement, params)
            plan = " > ".join(
                f"{n['Node Type']}({n.get('Index Name', '')})[rows={n['Actual Rows']}]"
                for n in nodes
            )
            print(f"list_conversations {order}, page 11: {plan}")
            scans = [n for n in nodes if n.get("Index Name") == index]
            assert scans, plan
            assert not any(n["Node Type"] in ("Seq Scan", "Sort") for n in nodes), plan
            assert scans[0]["Actual Rows"] <= 21, plan  # limit + 1, ten pages in
    finally:
        store.close()
