"""The stores the knowledge-graph tests run on: SQLite, PostgreSQL in its own schema, and
MongoDB in its own database; :func:`count_rows` counts a graph table (or collection)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import drop_mongo_database, drop_schema

from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore
from firefly_orm.sql._graph import graph_metadata

#: ``params=`` of a fixture over both databases (PostgreSQL marked, so ``--require-db`` sees it).
SQL_KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
#: ``params=`` over every database the graph lives in.
GRAPH_KINDS = [*SQL_KINDS, pytest.param("mongo", marks=pytest.mark.mongo)]
#: The graph's tables (SQL) and collections (MongoDB: ``<entries>.kg_<name>``).
GRAPH_NAMES = ("entities", "facts", "history", "pending")


def open_graph_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Like :func:`open_sql_store`, and ``"mongo"``: a MongoDBStore in a fresh database."""
    if request.param != "mongo":
        yield from open_sql_store(request, tmp_path)
        return
    from firefly_orm.mongo import MongoDBStore

    url = request.getfixturevalue("mongo_url")
    database = "kg_" + uuid.uuid4().hex[:10]
    store = MongoDBStore(url, database=database)
    store.initialize()
    yield store
    store.close()
    drop_mongo_database(url, database)


def count_rows(store: Any, name: str, user_id: str | None = None) -> int:
    """How many rows (documents) of the graph's ``name`` table (of ``user_id``) ``store`` holds."""
    where: dict[str, Any] = {} if user_id is None else {"user_id": user_id}
    if isinstance(store, SQLAlchemyStore):
        table = graph_metadata.tables[f"knowledge_{name}"]
        query = sa.select(sa.func.count()).select_from(table)
        if user_id is not None:
            query = query.where(table.c.user_id == user_id)
        with store.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    async def count(database: Any, collection_name: str) -> int:
        return int(await database[f"{collection_name}.kg_{name}"].count_documents(where))

    return int(store.run_database_call(count))


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


def record_in_a_process(url: str, place: str | None, names: list[str], barrier: Any) -> None:
    """Worker (spawned process): record ``names`` as entities of user ``ann`` after ``barrier``.

    ``url`` is a SQL store's (``place``: its schema) or a MongoDB server's
    (``place``: the database).
    """
    from firefly_orm.knowledge import ExtractedEntity, Extraction, KnowledgeGraph

    store: Any
    if url.startswith("mongodb"):
        from firefly_orm.mongo import MongoDBStore

        store = MongoDBStore(url, database=place or "test")
    else:
        store = SQLAlchemyStore(url, schema_name=place)
    try:
        graph = KnowledgeGraph(store)
        barrier.wait(timeout=60)
        graph.record("ann", Extraction(entities=[ExtractedEntity(name=n) for n in names]))
    finally:
        store.close()


def place_of(store: Any, request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """What :func:`record_in_a_process` needs to open ``store`` again: its URL and place."""
    if isinstance(store, SQLAlchemyStore):
        return store.engine.url.render_as_string(hide_password=False), store.schema_name
    return request.getfixturevalue("mongo_url"), store.database_name
