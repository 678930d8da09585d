"""The SQL stores the knowledge-graph tests run on: SQLite, and PostgreSQL in its own schema."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbutil import drop_schema

from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore

#: ``params=`` of a fixture over both databases (PostgreSQL marked, so ``--require-db`` sees it).
SQL_KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def open_sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLAlchemyStore]:
    """An initialised store of kind ``request.param``; closed (and its schema dropped) after."""
    if request.param == "sqlite":
        store: SQLAlchemyStore = SQLiteStore(tmp_path / "graph.sqlite3")
        store.initialize()
        yield store
        store.close()
        return
    url = request.getfixturevalue("postgres_url")
    schema = "kg_" + uuid.uuid4().hex[:10]
    store = PostgreSQLStore(url, schema_name=schema)
    store.initialize()
    yield store
    store.close()
    drop_schema(url, schema)


def record_in_a_process(url: str, schema: str | None, names: list[str], barrier: Any) -> None:
    """Worker (spawned process): record ``names`` as entities of user ``ann`` after ``barrier``."""
    from firefly_orm.knowledge import ExtractedEntity, Extraction, KnowledgeGraph
    from firefly_orm.sql import SQLAlchemyStore

    store = SQLAlchemyStore(url, schema_name=schema)
    try:
        graph = KnowledgeGraph(store)
        barrier.wait(timeout=60)
        graph.record("ann", Extraction(entities=[ExtractedEntity(name=n) for n in names]))
    finally:
        store.close()
