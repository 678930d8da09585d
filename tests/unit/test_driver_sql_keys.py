"""The working-memory key statements' driver-SQL helpers (execute_scalars, execute_rowcount)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from firefly_orm.sql import _driver_sql as ds

_T = sa.table("t", sa.column("id", sa.Integer), sa.column("doc", sa.JSON), sa.column("k", sa.Text))
_BY_KEY = sa.select(_T.c.doc).where(_T.c.k == sa.bindparam("key")).order_by(_T.c.id)
_DELETE_KEY = sa.delete(_T).where(
    sa.or_(_T.c.k == sa.bindparam("key"), _T.c.id == sa.bindparam("eid"))
)
_DELETE_IN = sa.delete(_T).where(_T.c.id.in_(sa.bindparam("ids", expanding=True)))


def _engine(tmp_path: Path) -> sa.Engine:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'k.sqlite3'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY, doc TEXT, k TEXT)")
        conn.execute(
            sa.insert(_T),
            [
                {"id": 1, "doc": {"a": 1}, "k": "x"},
                {"id": 2, "doc": None, "k": "x"},
                {"id": 3, "doc": [3], "k": "y"},
                {"id": 4, "doc": "four", "k": "z"},
            ],
        )
    return engine


def test_scalars_and_rowcounts_match_execute(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    seen: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda c, cur, sql, *a: seen.append(sql))
    with engine.begin() as conn:
        # JSON result processor applied, a JSON null kept as a value, no row: [].
        assert ds.execute_scalars(conn, _BY_KEY, {"key": "x"}) == [{"a": 1}, None]
        assert ds.execute_scalars(conn, _BY_KEY, {"key": "x"}) == list(
            conn.execute(_BY_KEY, {"key": "x"}).scalars()
        )
        assert ds.execute_scalars(conn, _BY_KEY, {"key": "none"}) == []
        assert ds.execute_rowcount(conn, _DELETE_KEY, {"key": "x", "eid": 3}) == 3
        assert ds.execute_rowcount(conn, _DELETE_KEY, {"key": "x", "eid": 3}) == 0
        # An expanding parameter falls back to Connection.execute, same answer.
        assert ds.driver_statement(conn, _DELETE_IN, {"ids": [4]}) is None
        assert ds.execute_rowcount(conn, _DELETE_IN, {"ids": [4, 5]}) == 1
        assert conn.exec_driver_sql("SELECT count(*) FROM t").scalar() == 0
    assert sum("DELETE" in sql for sql in seen) == 3  # engine events fire on the cached text
