"""Upstream-shaped data built by hand from the documented layouts (never upstream's code).

The Firefly framework's memory module ("upstream") stores an entry as its
pydantic ``model_dump(mode="json")``: ``entry_id`` (32 hex), ``scope``
(``"working"``...), ``key``, ``content``, ``metadata``, ``created_at`` and
``expires_at`` as ISO-8601 strings (``...Z``), ``importance``; no namespace.

* FileStore: ``<namespace>.json`` per namespace (``/`` and ``\\`` written as
  ``_``), a JSON object ``{entry_id: entry}``, indented;
* SQLiteStore: table ``firefly_memory(entry_id TEXT PRIMARY KEY, namespace TEXT
  NOT NULL, content TEXT NOT NULL)`` plus an index on ``namespace``, ``content``
  being the entry as compact JSON;
* MongoDBStore: one document per entry, the entry plus ``namespace`` (and
  ``scope`` as a string), dates as ISO strings, ``key``/``expires_at`` present
  even when null.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

Namespaces = Mapping[str, Sequence[dict[str, Any]]]


def iso(moment: datetime) -> str:
    """A UTC date-time as pydantic's JSON mode writes it (``Z`` suffix)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def upstream_entry(
    *,
    created_at: datetime,
    entry_id: str | None = None,
    scope: str = "working",
    key: str | None = None,
    content: Any = None,
    metadata: dict[str, Any] | None = None,
    expires_at: datetime | None = None,
    importance: float = 0.5,
) -> dict[str, Any]:
    """One entry in upstream's JSON shape (the eight fields, in upstream's order)."""
    return {
        "entry_id": entry_id if entry_id is not None else uuid.uuid4().hex,
        "scope": scope,
        "key": key,
        "content": content,
        "metadata": metadata if metadata is not None else {},
        "created_at": iso(created_at),
        "expires_at": iso(expires_at) if expires_at is not None else None,
        "importance": importance,
    }


def file_name(namespace: str) -> str:
    """Upstream FileStore's file name for ``namespace``."""
    return namespace.replace("/", "_").replace("\\", "_") + ".json"


def write_file_store(base_dir: Path, namespaces: Namespaces) -> None:
    """Write ``namespaces`` as an upstream FileStore directory."""
    base_dir.mkdir(parents=True, exist_ok=True)
    for namespace, entries in namespaces.items():
        body = {entry["entry_id"]: entry for entry in entries}
        (base_dir / file_name(namespace)).write_text(json.dumps(body, indent=2), "utf-8")


def create_sqlite_table(path: Path) -> sqlite3.Connection:
    """An upstream SQLiteStore database at ``path`` (table and index), open."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS firefly_memory ("
        "entry_id TEXT PRIMARY KEY, namespace TEXT NOT NULL, content TEXT NOT NULL)"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS idx_firefly_memory_namespace ON firefly_memory(namespace)"
    )
    return conn


def write_sqlite_store(path: Path, namespaces: Namespaces) -> None:
    """Write ``namespaces`` as an upstream SQLiteStore database."""
    conn = create_sqlite_table(path)
    with conn:
        for namespace, entries in namespaces.items():
            for entry in entries:
                conn.execute(
                    "INSERT OR REPLACE INTO firefly_memory VALUES (?, ?, ?)",
                    (entry["entry_id"], namespace, json.dumps(entry, separators=(",", ":"))),
                )
    conn.close()


def write_mongo_collection(
    url: str, database: str, collection: str, namespaces: Namespaces
) -> None:
    """Write ``namespaces`` as upstream MongoDBStore documents."""
    import pymongo

    client: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=5000)
    try:
        documents = [
            {**entry, "namespace": namespace, "scope": entry["scope"]}
            for namespace, entries in namespaces.items()
            for entry in entries
        ]
        if documents:
            client[database][collection].insert_many(documents)
    finally:
        client.close()


def sample_namespaces(now: datetime) -> dict[str, list[dict[str, Any]]]:
    """A small upstream data set: working-memory facts of two scopes and a custom
    namespace with a ``/``; live, expiring and already expired entries."""
    hour = timedelta(hours=1)
    return {
        "working:session-42": [
            upstream_entry(
                created_at=now - 3 * hour,
                key="doc_type",
                content="invoice",
                metadata={"scope_id": "session-42"},
            ),
            upstream_entry(
                created_at=now - 2 * hour,
                key="vendor",
                content={"name": "Acme Corp", "tags": ["b2b", 7, None, 1.5]},
                metadata={"scope_id": "session-42"},
                importance=0.9,
            ),
            upstream_entry(
                created_at=now - hour,
                key="cleared",
                content=None,
                metadata={"scope_id": "session-42"},
                expires_at=now + 24 * hour,
            ),
            upstream_entry(
                created_at=now - 4 * hour,
                key="stale",
                content="gone",
                metadata={"scope_id": "session-42"},
                expires_at=now - hour,
            ),
        ],
        "working:delegation:agent_a": [
            upstream_entry(
                created_at=now - 5 * hour,
                key="task",
                content="translate",
                metadata={"scope_id": "delegation:agent_a"},
                importance=0.0,
            ),
            upstream_entry(
                created_at=now - 5 * hour + timedelta(microseconds=1),
                key="lang",
                content="fr",
                metadata={"scope_id": "delegation:agent_a"},
                importance=1.0,
            ),
        ],
        "notes/2025": [
            upstream_entry(
                created_at=now - 6 * hour,
                scope="long_term",
                content=["remember", {"nested": {"deep": True}}],
            ),
        ],
    }
