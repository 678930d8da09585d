"""Minimal hand-written baselines: what a user writes with the plain driver instead.

Beside the same-work baselines of :mod:`bench.raw` (head row, versions, token
totals), these do only what a chat history and a key-value store need:

* a ``messages`` table (integer id, conversation, the message as JSON) with an
  index on ``(conversation, id)``; appending a turn is ONE multi-row
  ``INSERT`` of its messages (one statement, so one transaction and one commit);
  reading is ``... ORDER BY id`` (everything) or ``ORDER BY id DESC LIMIT n``
  (the last ``n``, reversed in Python);
* a ``kv`` table keyed by ``(namespace, key)``: ``INSERT ... ON CONFLICT DO
  UPDATE``, ``SELECT`` by key, ``DELETE`` by key, each one autocommitted
  statement.

Same drivers and durability as :mod:`bench.raw` (they subclass its connection
classes): stdlib ``sqlite3`` / ``aiosqlite`` with WAL and ``synchronous=FULL``,
psycopg 3 sync / async with ``synchronous_commit=on``.  The SQL is written once as
generators of statements (:data:`bench.raw.Steps`) that the sync and the async
driver feed.
"""

from __future__ import annotations

import json
from typing import Any

from bench import raw
from bench.raw import Dialect, Steps

_SQLITE_DDL = (
    """CREATE TABLE IF NOT EXISTS messages (
        id INTEGER PRIMARY KEY, conversation TEXT NOT NULL, message TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS ix_messages_conversation ON messages (conversation, id)",
    """CREATE TABLE IF NOT EXISTS kv (
        namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (namespace, key))""",
)

_PG_DDL = (
    """CREATE TABLE IF NOT EXISTS messages (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, conversation TEXT NOT NULL,
        message JSONB NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS ix_messages_conversation ON messages (conversation, id)",
    """CREATE TABLE IF NOT EXISTS kv (
        namespace TEXT NOT NULL, key TEXT NOT NULL, value JSONB NOT NULL,
        PRIMARY KEY (namespace, key))""",
)


def _ddl(d: Dialect) -> tuple[str, ...]:
    return _PG_DDL if d.pg else _SQLITE_DDL


# --------------------------------------------------------------------------- the SQL


def append_steps(d: Dialect, cid: str, messages: list[dict[str, Any]]) -> Steps:
    """One turn: a single multi-row INSERT of its messages."""
    values = ", ".join(["(?, " + d.json_param + ")"] * len(messages))
    params: list[Any] = []
    for message in messages:
        params.extend((cid, json.dumps(message)))
    yield d.q("INSERT INTO messages (conversation, message) VALUES " + values), tuple(params)


def read_all_steps(d: Dialect, cid: str) -> Steps:
    """Every message of a conversation, oldest first."""
    rows = yield d.q("SELECT message FROM messages WHERE conversation = ? ORDER BY id"), (cid,)
    return [raw.load_json(message) for (message,) in rows]


def read_last_steps(d: Dialect, cid: str, n: int) -> Steps:
    """The newest ``n`` messages, oldest first (one indexed ``DESC LIMIT`` scan)."""
    rows = yield (
        d.q("SELECT message FROM messages WHERE conversation = ? ORDER BY id DESC LIMIT ?"),
        (cid, n),
    )
    return [raw.load_json(message) for (message,) in reversed(rows)]


def kv_set_steps(d: Dialect, namespace: str, key: str, value: Any) -> Steps:
    """Upsert one key (one autocommitted statement)."""
    yield (
        d.q(
            "INSERT INTO kv (namespace, key, value) VALUES (?, ?, " + d.json_param + ") "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value"
        ),
        (namespace, key, json.dumps(value)),
    )


def kv_get_steps(d: Dialect, namespace: str, key: str) -> Steps:
    """One key's value, ``None`` when absent."""
    rows = yield d.q("SELECT value FROM kv WHERE namespace = ? AND key = ?"), (namespace, key)
    return raw.load_json(rows[0][0]) if rows else None


def kv_delete_steps(d: Dialect, namespace: str, key: str) -> Steps:
    """Delete one key."""
    yield d.q("DELETE FROM kv WHERE namespace = ? AND key = ?"), (namespace, key)


def namespace_of(scope: str) -> str:
    """The key-value namespace of a working-memory scope (as :mod:`bench.raw` names it)."""
    return f"working:{scope}"


# --------------------------------------------------------------------------- drivers


class _SyncMinimal(raw._SyncDriver):
    def append(self, cid: str, user: str, assistant: str, messages: list[dict[str, Any]]) -> None:
        self._run(append_steps(self.d, cid, messages))

    def read_all(self, cid: str) -> list[Any]:
        result: list[Any] = self._run(read_all_steps(self.d, cid))
        return result

    def read_last(self, cid: str, n: int) -> list[Any]:
        result: list[Any] = self._run(read_last_steps(self.d, cid, n))
        return result

    def kv_set(self, scope: str, key: str, value: Any) -> None:
        self._run(kv_set_steps(self.d, namespace_of(scope), key, value))

    def kv_get(self, scope: str, key: str) -> Any:
        return self._run(kv_get_steps(self.d, namespace_of(scope), key))

    def kv_delete(self, scope: str, key: str) -> None:
        self._run(kv_delete_steps(self.d, namespace_of(scope), key))

    def _create(self) -> None:
        for ddl in _ddl(self.d):
            self._execute(ddl, ())


class _AsyncMinimal(raw._AsyncDriver):
    async def append(
        self, cid: str, user: str, assistant: str, messages: list[dict[str, Any]]
    ) -> None:
        await self._run(append_steps(self.d, cid, messages))

    async def read_all(self, cid: str) -> list[Any]:
        result: list[Any] = await self._run(read_all_steps(self.d, cid))
        return result

    async def read_last(self, cid: str, n: int) -> list[Any]:
        result: list[Any] = await self._run(read_last_steps(self.d, cid, n))
        return result

    async def kv_set(self, scope: str, key: str, value: Any) -> None:
        await self._run(kv_set_steps(self.d, namespace_of(scope), key, value))

    async def kv_get(self, scope: str, key: str) -> Any:
        return await self._run(kv_get_steps(self.d, namespace_of(scope), key))

    async def kv_delete(self, scope: str, key: str) -> None:
        await self._run(kv_delete_steps(self.d, namespace_of(scope), key))

    async def _create(self) -> None:
        for ddl in _ddl(self.d):
            await self._execute(ddl, ())


class MinimalSQLite(_SyncMinimal, raw.RawSQLite):
    """stdlib sqlite3 (WAL, ``synchronous=FULL``), one statement per operation."""

    name = "sqlite3"

    def __init__(self, path: str) -> None:
        raw.RawSQLite.__init__(self, path)
        self._create()


class MinimalPostgres(_SyncMinimal, raw.RawPostgres):
    """psycopg 3 (sync, autocommit), one statement per operation."""

    name = "psycopg"

    def __init__(self, conninfo: str, schema: str) -> None:
        raw.RawPostgres.__init__(self, conninfo, schema)
        self._create()


class AsyncMinimalSQLite(_AsyncMinimal, raw.AsyncRawSQLite):
    """aiosqlite, same pragmas and statements as :class:`MinimalSQLite`."""

    name = "aiosqlite"

    async def open(self) -> None:
        await raw.AsyncRawSQLite.open(self)
        await self._create()


class AsyncMinimalPostgres(_AsyncMinimal, raw.AsyncRawPostgres):
    """psycopg 3 AsyncConnection, same statements as :class:`MinimalPostgres`."""

    name = "psycopg async"

    async def open(self) -> None:
        await raw.AsyncRawPostgres.open(self)
        await self._create()
