"""Which SQLite module loads sqlite-vec, and the errors that say what to install."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from firefly_orm.errors import StoreError
from firefly_orm.vector._errors import VectorUnavailableError
from firefly_orm.vector._sqlite_vec import load_sqlite_vec, sqlite_vec_module

pysqlite3 = pytest.importorskip("pysqlite3.dbapi2", reason="the vector extra installs it")


def _without_pysqlite3(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if pysqlite3-binary were not installed (its import raises ImportError)."""
    monkeypatch.setitem(sys.modules, "pysqlite3", None)
    monkeypatch.setitem(sys.modules, "pysqlite3.dbapi2", None)


def _nearest(module: Any) -> list[int]:
    """A vec0 table's two nearest rows to a query, through ``module``'s connection."""
    connection = module.connect(":memory:")
    try:
        load_sqlite_vec(connection)
        connection.execute(
            "CREATE VIRTUAL TABLE v USING vec0(embedding float[3] distance_metric=cosine)"
        )
        rows = [(1, "[1, 0, 0]"), (2, "[0, 1, 0]"), (3, "[0.9, 0.1, 0]")]
        connection.executemany("INSERT INTO v(rowid, embedding) VALUES (?, ?)", rows)
        found = connection.execute(
            "SELECT rowid FROM v WHERE embedding MATCH ? AND k = 2 ORDER BY distance",
            ("[1, 0, 0]",),
        ).fetchall()
        return [row[0] for row in found]
    finally:
        connection.close()


def test_pysqlite3_is_chosen_when_installed_and_loads_sqlite_vec() -> None:
    module = sqlite_vec_module()
    assert module is pysqlite3
    assert _nearest(module) == [1, 3]


def test_extension_loading_is_off_again_after_sqlite_vec_loaded() -> None:
    connection = sqlite_vec_module().connect(":memory:")
    try:
        load_sqlite_vec(connection)
        assert connection.execute("SELECT vec_version()").fetchone()[0].startswith("v")
        with pytest.raises(pysqlite3.OperationalError, match="not authorized"):
            connection.execute("SELECT load_extension('anything')")
    finally:
        connection.close()


def test_without_pysqlite3_a_stdlib_that_loads_extensions_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Python built with extension loading (Debian's): its sqlite3 serves.

    pysqlite3's dbapi2 stands in for such a ``sqlite3`` (the same DB-API, built
    with extension loading), because this machine's Python is built without.
    """
    _without_pysqlite3(monkeypatch)
    monkeypatch.setitem(sys.modules, "sqlite3", pysqlite3)
    module = sqlite_vec_module()
    assert module is pysqlite3
    assert _nearest(module) == [1, 3]


def test_without_pysqlite3_a_stdlib_without_extension_loading_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _without_pysqlite3(monkeypatch)
    stdlib = types.ModuleType("sqlite3")
    stdlib.Connection = type("Connection", (), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sqlite3", stdlib)
    with pytest.raises(VectorUnavailableError) as caught:
        sqlite_vec_module()
    message = str(caught.value)
    assert "firefly-orm[vector]" in message and "pysqlite3-binary" in message
    assert "enable_load_extension" in message
    assert isinstance(caught.value, StoreError)


def test_this_pythons_own_sqlite3_is_judged_by_what_it_can_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real stdlib module, whichever way this Python was built."""
    import sqlite3

    _without_pysqlite3(monkeypatch)
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        assert sqlite_vec_module() is sqlite3
        assert _nearest(sqlite3) == [1, 3]
    else:
        with pytest.raises(VectorUnavailableError, match="pysqlite3-binary"):
            sqlite_vec_module()
        with pytest.raises(VectorUnavailableError, match="cannot load extensions"):
            load_sqlite_vec(sqlite3.connect(":memory:"))


def test_without_sqlite_vec_the_vector_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sqlite_vec", None)
    with pytest.raises(VectorUnavailableError, match=r"sqlite-vec.*firefly-orm\[vector\]"):
        sqlite_vec_module()
    connection = pysqlite3.connect(":memory:")
    try:
        with pytest.raises(VectorUnavailableError, match="sqlite-vec"):
            load_sqlite_vec(connection)
    finally:
        connection.close()


def test_a_connection_that_cannot_load_extensions_is_refused_before_anything_runs() -> None:
    class NoLoading:
        calls: list[str] = []  # noqa: RUF012

        def execute(self, sql: str) -> None:
            self.calls.append(sql)

    with pytest.raises(VectorUnavailableError, match="cannot load extensions"):
        load_sqlite_vec(NoLoading())
    assert NoLoading.calls == []
