"""build_store against real databases: the PostgreSQL and MongoDB stores it builds are ready.

The database-free settings tests live in ``tests/unit/test_config.py``; the ``env``
fixture (no ``FIREFLY_AGENTIC_MEMORY_*`` variables, a clean CWD) is conftest's.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from dbutil import drop_schema

from firefly_orm.config import build_store

P = "FIREFLY_AGENTIC_MEMORY_"


@pytest.mark.postgres
def test_build_postgres_is_initialised(env: pytest.MonkeyPatch, postgres_url: str) -> None:
    import sqlalchemy as sa

    from firefly_orm.sql import PostgreSQLStore

    schema = "t_" + uuid.uuid4().hex[:10]
    env.setenv(P + "BACKEND", "postgres")
    env.setenv(P + "POSTGRES_URL", postgres_url)
    env.setenv(P + "POSTGRES_SCHEMA", schema)
    env.setenv(P + "POSTGRES_POOL_SIZE", "4")
    env.setenv(P + "POSTGRES_POOL_MIN_SIZE", "1")
    env.setenv(P + "POSTGRES_TIMEOUT", "5")
    try:
        store: Any = build_store()
        try:
            assert isinstance(store, PostgreSQLStore)
            assert (store.schema_name, store.pool_size, store.pool_min_size) == (schema, 4, 1)
            assert store.timeout == 5
            tables = sa.inspect(store.engine).get_table_names(schema=schema)
            assert "memory_entries" in tables
        finally:
            store.close()
    finally:
        drop_schema(postgres_url, schema)


@pytest.mark.mongo
def test_build_mongodb_is_initialised(env: pytest.MonkeyPatch, mongo_url: str) -> None:
    pytest.importorskip("beanie")
    from firefly_orm.mongo import MongoDBStore
    from firefly_orm.working import WorkingMemory

    database = "t_" + uuid.uuid4().hex[:10]
    env.setenv(P + "BACKEND", "mongodb")
    env.setenv(P + "MONGODB_URL", mongo_url)
    env.setenv(P + "MONGODB_DATABASE", database)
    env.setenv(P + "MONGODB_COLLECTION", "facts")
    import pymongo

    store: Any = build_store()
    client: Any = pymongo.MongoClient(mongo_url, serverSelectionTimeoutMS=5000)
    try:
        assert isinstance(store, MongoDBStore)
        wm = WorkingMemory(store=store, scope_id="m")
        wm.set("k", {"v": 1}, importance=0.6)
        assert wm.get("k") == {"v": 1}
        assert client[database]["facts"].count_documents({}) == 1
    finally:
        store.close()
        client.drop_database(database)
        client.close()
