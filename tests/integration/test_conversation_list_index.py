"""A user's conversation list pages through an index, on SQLite and PostgreSQL (issue 32).

``ConversationMemory.list_conversations`` is a keyset page over the heads'
partial indexes of migration 0010 (plain columns ``head_updated_at`` and
``head_archived``, both dialects).  With thousands of other users' heads and
thousands of the user's own (half of them archived), a page deep in the list
must walk the index from the cursor, in both orders: no sort, no scan; on
PostgreSQL (``EXPLAIN ANALYZE``) at most ``limit + 1`` index entries read, the
same as the first page; on SQLite the plan seeks the index to the cursor with
no temporary B-tree, and the statement runs as many virtual-machine steps ten
pages in as on the first page.  The statement checked is the one the read
ran, captured from the driver.  The heads are written at 0009 (before the
columns existed) and the upgrade to 0010 backfills them.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import drop_schema, walk_plan

from firefly_orm import migrate
from firefly_orm.conversation import ConversationMemory
from firefly_orm.sql import PostgreSQLStore, SQLiteStore

UPDATED = "ix_memory_entries_head_updated"
CREATED = "ix_memory_entries_head_created"
OLD_UPDATED = "ix_memory_entries_conv_updated"
OLD_CREATED = "ix_memory_entries_conv_created"
USERS, MINE = 400, 3000  # heads of other users (10 each), heads of the listing user


BEFORE = "0009_conversation_listing"


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
    return names & {UPDATED, CREATED, OLD_UPDATED, OLD_CREATED}


_OLD_HEADS = {
    # (namespace, key, content): what the backfill makes of each, (updated, archived)
    ("conversation:a", "head", '{"updated_at": "2026-11-01T10:00:00.000000Z"}'): (
        "2026-11-01T10:00:00.000000Z",
        False,
    ),
    ("conversation:b", "head", '{"updated_at": "2026-11-02T10:00:00.000000Z", "archived": true}'): (
        "2026-11-02T10:00:00.000000Z",
        True,
    ),
    ("conversation:c", "head", '{"turn_count": 1}'): ("", False),  # an earlier release's head
    ("conversation:d", "head", '{"updated_at": 5, "archived": "yes"}'): ("", False),
    ("conversation:e", "head", '"not an object"'): ("", False),
    ("conversation:a", "turn:0000000001", '{"updated_at": "x"}'): (None, None),
    ("working:a", "head", '{"updated_at": "x"}'): (None, None),
}


def _write_old_heads(url: str, schema: str | None) -> None:
    table = sa.table(
        "memory_entries",
        *(sa.column(n) for n in ("entry_id", "namespace", "scope", "key", "content")),
        *(sa.column(n) for n in ("metadata", "created_at", "importance", "version", "user_id")),
        schema=schema,
    )
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for number, (namespace, key, content) in enumerate(_OLD_HEADS):
                value: Any = sa.literal(content)
                if engine.dialect.name == "postgresql":
                    value = sa.cast(value, sa.dialects.postgresql.JSONB)
                conn.execute(
                    table.insert().values(
                        entry_id=f"old{number}",
                        namespace=namespace,
                        scope="conversation",
                        key=key,
                        content=value,
                        metadata=sa.literal("{}")
                        if engine.dialect.name == "sqlite"
                        else sa.cast(sa.literal("{}"), sa.dialects.postgresql.JSONB),
                        created_at=sa.func.current_timestamp(),
                        importance=0.5,
                        version=1,
                        user_id="ann",
                    )
                )
    finally:
        engine.dispose()


def _backfilled(url: str, schema: str | None) -> dict[tuple[str, str, str], tuple[Any, Any]]:
    name = "memory_entries" if schema is None else f'"{schema}".memory_entries'
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(
                f"SELECT entry_id, head_updated_at, head_archived FROM {name} ORDER BY entry_id"
            ).all()
    finally:
        engine.dispose()
    found = {row[0]: (row[1], None if row[2] is None else bool(row[2])) for row in rows}
    return {head: found[f"old{number}"] for number, head in enumerate(_OLD_HEADS)}


def _round_trip(url: str, schema: str | None) -> None:
    # 0009 gave SQLite no JSON expression index (see its docstring); 0010 gives both the same
    old = {OLD_CREATED} if url.startswith("sqlite") else {OLD_UPDATED, OLD_CREATED}
    migrate.upgrade(url, revision=BEFORE, schema_name=schema)
    assert _listing_indexes(url, schema) == old
    _write_old_heads(url, schema)
    migrate.upgrade(url, schema_name=schema)
    assert _listing_indexes(url, schema) == {UPDATED, CREATED}
    assert _backfilled(url, schema) == _OLD_HEADS
    migrate.downgrade(url, BEFORE, schema_name=schema)
    assert _listing_indexes(url, schema) == old
    assert migrate.current(url, schema_name=schema) == BEFORE
    migrate.upgrade(url, schema_name=schema)
    assert _listing_indexes(url, schema) == {UPDATED, CREATED}
    assert _backfilled(url, schema) == _OLD_HEADS
    assert migrate.current(url, schema_name=schema) == migrate.head()


def test_sqlite_migration_0010_upgrade_and_downgrade(tmp_path: Path) -> None:
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
        listed = (
            "SELECT count(*) FROM memory_entries INDEXED BY ix_memory_entries_head_updated "
            "WHERE user_id = 'ann' AND head_archived = 0 AND head_updated_at IS NOT NULL"
        )
        assert conn.execute(listed).fetchone() == (0,)
    finally:
        conn.close()


@pytest.mark.postgres
def test_postgres_migration_0010_upgrade_and_downgrade(postgres_url: str, schema: str) -> None:
    _round_trip(postgres_url, schema)


def _captured(engine: sa.Engine, run: Any) -> tuple[Any, tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        if statement.lstrip().startswith("SELECT") and "head_updated_at IS NOT NULL" in statement:
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
        'updated_at', strftime('%Y-%m-%dT%H:%M:%f000Z', 'now', '-' || i || ' seconds'),
        'archived', json(CASE WHEN i % 2 = 0 THEN 'true' ELSE 'false' END)),
    '{}', datetime('now', '-' || (i * 7 % :count) || ' seconds'), 0.5, 1,
    CASE WHEN :user IS NULL THEN 'user' || (i % 400) ELSE :user END
FROM n
"""


def _vm_steps(engine: sa.Engine, statement: str, params: Any) -> int:
    """How many SQLite virtual-machine steps running ``statement`` takes (a read count:
    each row an index gives costs steps, a row it skips too)."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        raw.set_progress_handler(count, 1)
        try:
            conn.exec_driver_sql(statement, params).all()
        finally:
            raw.set_progress_handler(None, 1)
    return steps


def test_sqlite_pages_walk_the_listing_indexes(tmp_path: Path) -> None:
    path = tmp_path / "list.sqlite3"
    engine = sa.create_engine(f"sqlite:///{path}")
    migrate.upgrade(f"sqlite:///{path}", revision=BEFORE)  # heads as 0009 left them
    with engine.begin() as conn:
        conn.execute(sa.text(_SQLITE_HEADS), {"count": USERS * 10, "prefix": "o", "user": None})
        conn.execute(sa.text(_SQLITE_HEADS), {"count": MINE, "prefix": "a", "user": "ann"})
    engine.dispose()
    store = SQLiteStore(path)
    store.initialize()  # 0010 backfills the columns
    try:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
        mem = ConversationMemory(store=store)
        for order, index, seek in (
            ("updated_desc", UPDATED, "head_updated_at<?"),
            ("created_asc", CREATED, "created_at>?"),
        ):
            _, first = _captured(
                store.engine, lambda o=order: mem.list_conversations("ann", limit=20, order=o)
            )
            statement, params = _deep_page(mem, order)
            with store.engine.connect() as conn:
                rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
            plan = " | ".join(str(row[-1]) for row in rows)
            first_steps = _vm_steps(store.engine, *first)
            deep_steps = _vm_steps(store.engine, statement, params)
            print(f"list_conversations {order} plan: {plan}; VM steps {first_steps} / {deep_steps}")
            assert f"USING INDEX {index}" in plan, plan
            assert "head_archived=?" in plan, plan  # archived ones are not read and skipped
            assert "TEMP B-TREE" not in plan, plan  # the index gives the order: no sort
            assert seek in plan, plan  # it seeks to the cursor, not reads up to it
            # Ten pages in costs what the first page costs (a scan up to the cursor
            # would cost ten times as much).
            assert deep_steps < 1.5 * first_steps, (first_steps, deep_steps)
    finally:
        store.close()


_PG_HEADS = """
INSERT INTO "{schema}".memory_entries (entry_id, namespace, scope, key, content, metadata,
    created_at, importance, version, user_id)
SELECT md5(%(prefix)s || i), 'conversation:' || %(prefix)s || i, 'conversation', 'head',
    jsonb_build_object('conversation_id', %(prefix)s || i, 'next_turn_id', 1,
        'total_tokens', 3, 'turn_count', 1, 'summary', NULL, 'total_messages', 2,
        'updated_at', to_char((now() - i * interval '1 second') AT TIME ZONE 'UTC',
            'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'archived', i %% 2 = 0),
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
    return walk_plan(plan)


@pytest.mark.postgres
def test_postgres_pages_read_limit_plus_one_index_entries(
    postgres_url: str, postgres_admin_engine: sa.Engine, schema: str
) -> None:
    migrate.upgrade(postgres_url, revision=BEFORE, schema_name=schema)  # heads as 0009 left them
    with postgres_admin_engine.begin() as conn:
        heads = _PG_HEADS.format(schema=schema)
        conn.exec_driver_sql(heads, {"count": USERS * 10, "prefix": "o", "user": None})
        conn.exec_driver_sql(heads, {"count": MINE, "prefix": "a", "user": "ann"})
    store = PostgreSQLStore(postgres_url, schema_name=schema, pool_min_size=0)
    store.initialize()  # 0010 backfills the columns
    try:
        with postgres_admin_engine.begin() as conn:
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
