"""The stores that keep vectors, opened for a test: one fixture body for the vector suites.

``VECTOR_STORES`` are the ``pytest.param`` of each (memory, files, MongoDB, SQLite
with sqlite-vec, PostgreSQL with pgvector), with their database marks;
:func:`vector_store` opens the one a parametrized fixture asks for and cleans up
after it (a PostgreSQL schema of its own, downgraded to base).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from store_backends import open_backend

from firefly_orm import migrate
from firefly_orm.sql import PostgreSQLStore, SQLiteStore

VECTOR_STORES = [
    "memory",
    "file",
    pytest.param("mongo", marks=pytest.mark.mongo),
    "sqlite",
    pytest.param("pgvector", marks=pytest.mark.pgvector),
]


@contextlib.contextmanager
def vector_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """The store ``request.param`` names, keeping vectors; closed and cleaned up after."""
    kind = request.param
    if kind in ("memory", "file", "mongo"):
        opened = open_backend(request, kind)
        try:
            yield opened.store
        finally:
            opened.close()
    elif kind == "sqlite":
        sqlite = SQLiteStore(tmp_path / "vectors.sqlite3", vectors=True)
        try:
            yield sqlite
        finally:
            sqlite.close()
    else:
        url, schema = request.getfixturevalue("pgvector_url"), f"v_{uuid.uuid4().hex[:10]}"
        postgres = PostgreSQLStore(url, schema_name=schema, vectors=True, pool_min_size=0)
        try:
            yield postgres
        finally:
            postgres.close()
            migrate.downgrade(url, "base", schema_name=schema)
