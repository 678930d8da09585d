"""Stores for the memory-layer test modules (working memory, manager).

Databases come from conftest's ``postgres_url`` / ``mongo_url`` fixtures (env URL,
then testcontainers, then, for MongoDB, a SecantusDB server; else a skip), each
test in a schema or database of its own that is dropped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dbutil import drop_mongo_database, drop_schema

from firefly_orm.file_store import FileStore
from firefly_orm.sql import PostgreSQLStore, SQLiteStore
from firefly_orm.store import InMemoryStore

LAYER_BACKENDS = [
    "memory",
    "file",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mongo", marks=pytest.mark.mongo),
]

Cleanup = Callable[[], None] | None


def open_layer_store(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[Any, Cleanup]:
    """``(store, cleanup)`` for ``kind``."""
    if kind == "memory":
        return InMemoryStore(), None
    if kind == "file":
        return FileStore(tmp_path / "files"), None
    if kind == "sqlite":
        sqlite_store = SQLiteStore(tmp_path / "db" / "memory.sqlite3")
        return sqlite_store, sqlite_store.close
    name = "t_" + uuid.uuid4().hex[:10]
    if kind == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        pg_store = PostgreSQLStore(url, schema_name=name, pool_min_size=0)
        pg_store.initialize()

        def drop_pg() -> None:
            pg_store.close()
            drop_schema(url, name)

        return pg_store, drop_pg
    if kind == "mongo":
        from firefly_orm.mongo import MongoDBStore

        mongo_url: str = request.getfixturevalue("mongo_url")
        mongo_store = MongoDBStore(mongo_url, database=name)

        def drop_mongo() -> None:
            mongo_store.close()
            drop_mongo_database(mongo_url, name)

        return mongo_store, drop_mongo
    raise ValueError(f"unknown backend {kind!r}")
