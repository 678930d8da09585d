"""What a layer backend holds at rest, read around firefly_orm (for privacy tests).

* :func:`raw_text`: every stored row as text: on SQLite every table of the
  file (full-text shadow tables included), on PostgreSQL every table of the
  test's schema as JSON (the ``search_vector`` column included), on MongoDB
  every document of the test's database, FileStore's files byte for byte, the
  in-memory store's rows, every Redis key of the test's prefix with its value.
* :func:`search_terms`: the terms of the full-text index itself (SQLite's FTS5
  vocabulary, PostgreSQL's tsvector lexemes, Redis's word sets); ``None`` where
  the backend keeps no index at rest.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from typing import Any

import sqlalchemy as sa
from store_backends import OpenedBackend

__all__ = ["raw_text", "search_terms"]

_POSTGRES = frozenset({"postgres", "pgbouncer"})


def _sqlite_path(backend: OpenedBackend) -> str:
    return str(backend.store.engine.url.database)


def _postgres_admin(backend: OpenedBackend) -> sa.Engine:
    admin = backend.place.postgres_admin
    assert admin is not None, "the PostgreSQL backends open with the admin engine"
    return admin


def raw_text(backend: OpenedBackend) -> str:
    """Everything ``backend`` holds, read without firefly_orm, as one text."""
    name, store = backend.name, backend.store
    if name == "sqlite":
        with closing(sqlite3.connect(_sqlite_path(backend))) as conn:
            tables = [
                row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            return "\n".join(
                repr(row) for table in tables for row in conn.execute(f'SELECT * FROM "{table}"')
            )
    if name in _POSTGRES:
        schema = backend.place.name
        with _postgres_admin(backend).connect() as conn:
            names = conn.execute(
                sa.text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s"),
                {"s": schema},
            ).scalars()
            return "\n".join(
                row
                for table in names.all()
                for row in conn.execute(
                    sa.text(f'SELECT row_to_json(t)::text FROM "{schema}"."{table}" t')
                ).scalars()
            )
    if name == "mongo":
        from pymongo import MongoClient

        client: MongoClient[dict[str, Any]] = MongoClient(backend.place.mongo())
        try:
            database = client[backend.place.name]
            return "\n".join(
                repr(document)
                for collection in database.list_collection_names()
                for document in database[collection].find()
            )
        finally:
            client.close()
    if name == "file":
        root = backend.place.tmp_path / "files"
        return "\n".join(
            path.read_bytes().decode("utf-8", "replace")
            for path in sorted(root.rglob("*"))
            if path.is_file()
        )
    if name == "redis":
        from redis_server import raw_dump

        return raw_dump(backend.place.redis(), backend.place.name)
    assert name == "memory", name
    return "\n".join(
        json.dumps(entry.to_json_dict())
        for namespace in store.namespaces
        for entry in store.load(namespace)
    )


def search_terms(backend: OpenedBackend) -> set[str] | None:
    """The terms of ``backend``'s full-text index (``None``: it keeps none at rest)."""
    if backend.name == "sqlite":
        with closing(sqlite3.connect(_sqlite_path(backend))) as conn:
            conn.execute(
                "CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, memory_entries_fts, row)"
            )
            return {row[0] for row in conn.execute("SELECT term FROM temp.terms")}
    if backend.name in _POSTGRES:
        schema = backend.place.name
        with _postgres_admin(backend).connect() as conn:
            return set(
                conn.execute(
                    sa.text(
                        "SELECT DISTINCT unnest(tsvector_to_array(search_vector)) "
                        f'FROM "{schema}".memory_entries WHERE search_vector IS NOT NULL'
                    )
                ).scalars()
            )
    if backend.name == "redis":
        from redis_server import search_words

        return search_words(backend.place.redis(), backend.place.name)
    return None
