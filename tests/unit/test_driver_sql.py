"""Statements run as cached SQL text (firefly_orm.sql._driver_sql): same rows, events kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from dbutil import statements_sent

from firefly_orm.sql import _driver_sql as ds


def _engine(tmp_path: Path) -> sa.Engine:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'd.sqlite3'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY, doc TEXT, n INTEGER)")
    return engine


_T = sa.table(
    "t", sa.column("id", sa.Integer), sa.column("doc", sa.JSON), sa.column("n", sa.Integer)
)
_INSERT = sa.insert(_T).returning(_T.c.id, _T.c.doc)
_UPDATE = (
    sa.update(_T)
    .where(_T.c.id == sa.bindparam("eid"))
    .values(n=_T.c.n + 41)
    .returning(_T.c.doc, _T.c.n)
)


def test_same_rows_as_execute_and_events_fire(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    seen: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda c, cur, sql, *a: seen.append(sql))
    with engine.begin() as conn:
        row = ds.execute_first(conn, _INSERT, {"id": 1, "doc": {"a": [1, 2]}, "n": 1})
        assert row == (1, {"a": [1, 2]})  # the JSON column's bind and result processors ran
        assert ds.execute_first(conn, _UPDATE, {"eid": 1}) == ({"a": [1, 2]}, 42)
        assert ds.execute_first(conn, _UPDATE, {"eid": 2}) is None
        core = conn.execute(_UPDATE, {"eid": 1}).first()
        assert core is not None and tuple(core) == ({"a": [1, 2]}, 83)
    assert len(seen) == 4 and seen[0].startswith("INSERT INTO t")
    engine.dispose()


def test_compiled_once_per_parameter_names(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with engine.connect() as conn:
        first = ds.driver_statement(conn, _UPDATE, {"eid": 1})
        assert first is not None and first is ds.driver_statement(conn, _UPDATE, {"eid": 7})
        assert first.sql.count("?") == 2 and 41 in first.fixed.values()  # a literal, bound once
        other = ds.driver_statement(conn, _INSERT, {"id": 1, "doc": None})
        assert other is not None and "n" not in other.sql
    engine.dispose()


def test_schema_map_rendered_and_expanding_falls_back(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with engine.connect() as conn:
        mapped = conn.execution_options(schema_translate_map={None: "main"})
        table = sa.Table("t", sa.MetaData(), sa.Column("n", sa.Integer))
        compiled = ds.driver_statement(mapped, sa.update(table), {"n": 1})
        assert compiled is not None and "main.t" in compiled.sql
        stmt: Any = sa.select(_T.c.id).where(_T.c.id.in_(sa.bindparam("ids", expanding=True)))
        assert ds.driver_statement(conn, stmt, {"ids": [1]}) is None
        assert ds.execute_first(conn, stmt, {"ids": [1]}) is None  # through execute instead
        required: Any = sa.update(_T).values(n=sa.bindparam("missing"))
        assert ds.driver_statement(conn, required, {}) is None
    engine.dispose()


def test_sqlite_append_runs_cached_text(tmp_path: Path) -> None:
    """A turn that needs no eviction: the head bump and the insert go as cached SQL text
    (no compiled Core statement, so no per-call cache key), and nothing else runs."""
    from firefly_orm.conversation import ConversationMemory
    from firefly_orm.sql import SQLiteStore

    store = SQLiteStore(tmp_path / "s.sqlite3")
    memory = ConversationMemory(store=store)
    memory.add_turn("c", "hi", "hello")  # a new conversation: the general path
    with statements_sent(store.engine) as sent:
        memory.add_turn("c", "again", "sure")
    # (BEGIN IMMEDIATE is the engine's begin hook; then two texts, no compiled statement)
    assert [s for s in sent if s[0] != "BEGIN"] == [("UPDATE", True), ("INSERT", True)], sent
    assert [(t.turn_id, t.assistant_response) for t in memory.get_turns("c")] == [
        (0, "hello"),
        (1, "sure"),
    ]
    store.close()


def test_conversation_reads_run_cached_text(tmp_path: Path) -> None:
    """The history and last-N reads list the turns' contents as cached SQL text (no
    compiled Core statement), one statement each, and read back what was written."""
    from firefly_orm.conversation import ConversationMemory
    from firefly_orm.sql import SQLiteStore

    store = SQLiteStore(tmp_path / "s.sqlite3")
    memory = ConversationMemory(store=store)
    for n in range(3):
        said = [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]
        memory.add_turn("c", f"q{n}", f"a{n}", said)
    with statements_sent(store.engine) as sent:
        history = memory.get_message_history("c")
        recent = memory.get_recent_messages("c", 2)
    assert [s for s in sent if s[0] != "BEGIN"] == [("SELECT", True), ("SELECT", True)], sent
    assert [m["content"] for m in history] == ["q0", "a0", "q1", "a1", "q2", "a2"]
    assert recent == history[-2:]
    store.close()
