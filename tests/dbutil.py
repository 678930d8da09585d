"""Clean-up helpers shared by the database tests (one place for each)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa


def drop_schema(target: str | sa.Engine, schema: str) -> None:
    """``DROP SCHEMA IF EXISTS <schema> CASCADE`` on a URL or an engine (name quoted)."""
    engine = (
        sa.create_engine(target, poolclass=sa.pool.NullPool) if isinstance(target, str) else target
    )
    try:
        with engine.begin() as conn:
            conn.execute(sa.schema.DropSchema(schema, cascade=True, if_exists=True))
    finally:
        if isinstance(target, str):
            engine.dispose()


def drop_mongo_database(url: str, name: str) -> None:
    """Drop one MongoDB database."""
    import pymongo

    client: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=5000)
    try:
        client.drop_database(name)
    finally:
        client.close()
