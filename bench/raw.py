"""Raw-driver baselines: stdlib ``sqlite3`` / ``aiosqlite`` and psycopg 3 (sync and async).

They store the same logical rows as the library does for a conversation: one row
per turn (prompt, response, raw messages as JSON, token estimate, timestamp) and a
head row per conversation holding the next turn id, the running token total, the
turn count and a version; history reads use the ``(conversation, turn)`` primary
key index.  Working-memory facts are one row per ``(namespace, key)``.

Each operation is one transaction: ``BEGIN IMMEDIATE``/``BEGIN`` ... ``COMMIT``
(SQLite: WAL, ``synchronous=FULL``; Postgres: ``synchronous_commit`` left at its
default ``on``).  Reads are single statements in autocommit mode.

The SQL logic is written once as generators of ``(sql, params)`` steps; a sync
and an async driver feed them, so the sync and async baselines do identical work.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Generator
from datetime import UTC, datetime
from typing import Any

from bench.common import UNLIMITED, estimate_tokens

Steps = Generator[tuple[str, tuple[Any, ...]], list[tuple[Any, ...]], Any]

_SQLITE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS heads (
        conversation TEXT PRIMARY KEY, next_turn INTEGER NOT NULL,
        total_tokens INTEGER NOT NULL, turn_count INTEGER NOT NULL, version INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS turns (
        conversation TEXT NOT NULL, turn INTEGER NOT NULL, token_estimate INTEGER NOT NULL,
        created_at TEXT NOT NULL, content TEXT NOT NULL, PRIMARY KEY (conversation, turn))""",
    """CREATE TABLE IF NOT EXISTS facts (
        namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
        importance REAL NOT NULL, updated_at TEXT NOT NULL, PRIMARY KEY (namespace, key))""",
)

_PG_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS heads (
        conversation TEXT PRIMARY KEY, next_turn BIGINT NOT NULL,
        total_tokens BIGINT NOT NULL, turn_count BIGINT NOT NULL, version BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS turns (
        conversation TEXT NOT NULL, turn BIGINT NOT NULL, token_estimate BIGINT NOT NULL,
        created_at TIMESTAMPTZ NOT NULL, content JSONB NOT NULL,
        PRIMARY KEY (conversation, turn))""",
    """CREATE TABLE IF NOT EXISTS facts (
        namespace TEXT NOT NULL, key TEXT NOT NULL, value JSONB NOT NULL,
        importance DOUBLE PRECISION NOT NULL, updated_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (namespace, key))""",
)

_EVICT_BATCH = 8


class Dialect:
    """The few differences between the SQLite and the Postgres SQL."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pg = name == "postgresql"
        self.begin_write = "BEGIN" if self.pg else "BEGIN IMMEDIATE"
        self.lock = " FOR UPDATE" if self.pg else ""
        self.json_param = "?::jsonb" if self.pg else "?"

    def q(self, sql: str) -> str:
        """Placeholders for this driver (``?`` for sqlite3, ``%s`` for psycopg)."""
        return sql.replace("?", "%s") if self.pg else sql

    def now(self) -> Any:
        moment = datetime.now(UTC)
        return moment if self.pg else moment.isoformat()


def load_json(value: Any) -> Any:
    """A JSON column's value: text (sqlite3) is parsed, JSONB (psycopg) is already parsed."""
    return json.loads(value) if isinstance(value, str | bytes) else value


# --------------------------------------------------------------------------- the logic


def _turn_row(d: Dialect, user: str, assistant: str, messages: Any) -> tuple[int, Any, str]:
    """(token estimate, timestamp, JSON content) of one stored turn."""
    estimate = estimate_tokens(user, assistant)
    now = d.now()
    content = json.dumps(
        {
            "user_prompt": user,
            "assistant_response": assistant,
            "raw_messages": messages,
            "timestamp": now if isinstance(now, str) else now.isoformat(),
            "token_estimate": estimate,
        }
    )
    return estimate, now, content


def add_turn_steps(
    d: Dialect,
    cid: str,
    user: str,
    assistant: str,
    messages: list[dict[str, str]],
    max_tokens: int,
) -> Steps:
    """One turn: read the head (locked), insert the turn, evict FIFO, write the head."""
    estimate, now, content = _turn_row(d, user, assistant, messages)
    yield d.begin_write, ()
    rows = yield (
        d.q(
            "SELECT next_turn, total_tokens, turn_count FROM heads WHERE conversation = ?" + d.lock
        ),
        (cid,),
    )
    turn, total, count = rows[0] if rows else (0, 0, 0)
    yield (
        d.q(
            "INSERT INTO turns (conversation, turn, token_estimate, created_at, content) "
            "VALUES (?, ?, ?, ?, " + d.json_param + ")"
        ),
        (cid, turn, estimate, now, content),
    )
    total += estimate
    count += 1
    if total > max_tokens:
        evicted: list[int] = []
        while total > max_tokens and count > 1:
            oldest = yield (
                d.q(
                    "SELECT turn, token_estimate FROM turns WHERE conversation = ? AND turn > ? "
                    "ORDER BY turn LIMIT ?"
                ),
                (cid, evicted[-1] if evicted else -1, _EVICT_BATCH),
            )
            if not oldest:
                break
            for old_turn, old_estimate in oldest:
                if total <= max_tokens or count <= 1:
                    break
                evicted.append(old_turn)
                total -= old_estimate
                count -= 1
        if evicted:
            yield (
                d.q("DELETE FROM turns WHERE conversation = ? AND turn >= ? AND turn <= ?"),
                (cid, evicted[0], evicted[-1]),
            )
    yield (
        d.q(
            "INSERT INTO heads (conversation, next_turn, total_tokens, turn_count, version) "
            "VALUES (?, ?, ?, ?, 1) ON CONFLICT (conversation) DO UPDATE SET "
            "next_turn = excluded.next_turn, total_tokens = excluded.total_tokens, "
            "turn_count = excluded.turn_count, version = heads.version + 1"
        ),
        (cid, turn + 1, total, count),
    )
    yield "COMMIT", ()


def history_steps(d: Dialect, cid: str, budget: int | None) -> Steps:
    """Flattened raw messages of the whole history, or of the newest turns within budget."""
    if budget is None:
        rows = yield (
            d.q("SELECT content FROM turns WHERE conversation = ? ORDER BY turn"),
            (cid,),
        )
    else:
        rows = yield (
            d.q(
                "SELECT content FROM (SELECT turn, content, SUM(token_estimate) OVER "
                "(ORDER BY turn DESC) AS running FROM turns WHERE conversation = ?) AS t "
                "WHERE running <= ? ORDER BY turn"
            ),
            (cid, budget),
        )
    return [m for (content,) in rows for m in load_json(content)["raw_messages"]]


def fact_set_steps(d: Dialect, namespace: str, key: str, value: Any) -> Steps:
    """Upsert one working-memory fact."""
    yield d.begin_write, ()
    yield (
        d.q(
            "INSERT INTO facts (namespace, key, value, importance, updated_at) "
            "VALUES (?, ?, " + d.json_param + ", ?, ?) "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, "
            "importance = excluded.importance, updated_at = excluded.updated_at"
        ),
        (namespace, key, json.dumps(value), 0.5, d.now()),
    )
    yield "COMMIT", ()


def fact_get_steps(d: Dialect, namespace: str, key: str) -> Steps:
    """Read one fact (``None`` when absent)."""
    rows = yield d.q("SELECT value FROM facts WHERE namespace = ? AND key = ?"), (namespace, key)
    return load_json(rows[0][0]) if rows else None


def fact_delete_steps(d: Dialect, namespace: str, key: str) -> Steps:
    """Delete one fact."""
    yield d.begin_write, ()
    yield d.q("DELETE FROM facts WHERE namespace = ? AND key = ?"), (namespace, key)
    yield "COMMIT", ()


def fill_rows(
    d: Dialect, conversations: list[tuple[str, list[tuple[str, str, Any]]]]
) -> tuple[str, list[tuple[Any, ...]], str, list[tuple[Any, ...]]]:
    """Statements and rows that bulk-load conversations (untimed scale set-up)."""
    turn_rows: list[tuple[Any, ...]] = []
    head_rows: list[tuple[Any, ...]] = []
    for cid, turns in conversations:
        total = 0
        for number, (user, assistant, messages) in enumerate(turns):
            estimate, now, content = _turn_row(d, user, assistant, messages)
            total += estimate
            turn_rows.append((cid, number, estimate, now, content))
        head_rows.append((cid, len(turns), total, len(turns)))
    insert_turns = d.q(
        "INSERT INTO turns (conversation, turn, token_estimate, created_at, content) "
        "VALUES (?, ?, ?, ?, " + d.json_param + ")"
    )
    insert_heads = d.q(
        "INSERT INTO heads (conversation, next_turn, total_tokens, turn_count, version) "
        "VALUES (?, ?, ?, ?, 1)"
    )
    return insert_turns, turn_rows, insert_heads, head_rows


# --------------------------------------------------------------------------- drivers


class _SyncDriver:
    d: Dialect
    max_tokens: int

    def _execute(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _run(self, steps: Steps) -> Any:
        rows: Any = None  # a generator must be started with None
        in_tx = False
        try:
            while True:
                sql, params = steps.send(rows)
                in_tx = in_tx or sql.startswith("BEGIN")
                rows = self._execute(sql, params)
                if sql == "COMMIT":
                    in_tx = False
        except StopIteration as stop:
            return stop.value
        except BaseException:
            if in_tx:
                self._execute("ROLLBACK", ())
            raise

    def add_turn(self, cid: str, user: str, assistant: str, messages: list[dict[str, str]]) -> None:
        self._run(add_turn_steps(self.d, cid, user, assistant, messages, self.max_tokens))

    def history(self, cid: str, budget: int | None) -> list[Any]:
        result: list[Any] = self._run(history_steps(self.d, cid, budget))
        return result

    def wm_set(self, scope: str, key: str, value: Any) -> None:
        self._run(fact_set_steps(self.d, f"working:{scope}", key, value))

    def wm_get(self, scope: str, key: str) -> Any:
        return self._run(fact_get_steps(self.d, f"working:{scope}", key))

    def wm_delete(self, scope: str, key: str) -> None:
        self._run(fact_delete_steps(self.d, f"working:{scope}", key))

    def bulk_fill(self, conversations: list[tuple[str, list[tuple[str, str, Any]]]]) -> None:
        insert_turns, turn_rows, insert_heads, head_rows = fill_rows(self.d, conversations)
        self._execute("BEGIN", ())
        try:
            self._executemany(insert_turns, turn_rows)
            self._executemany(insert_heads, head_rows)
        except BaseException:
            self._execute("ROLLBACK", ())
            raise
        self._execute("COMMIT", ())

    def _executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        raise NotImplementedError


class _AsyncDriver:
    d: Dialect
    max_tokens: int

    async def _execute(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    async def _run(self, steps: Steps) -> Any:
        rows: Any = None  # a generator must be started with None
        in_tx = False
        try:
            while True:
                sql, params = steps.send(rows)
                in_tx = in_tx or sql.startswith("BEGIN")
                rows = await self._execute(sql, params)
                if sql == "COMMIT":
                    in_tx = False
        except StopIteration as stop:
            return stop.value
        except BaseException:
            if in_tx:
                await self._execute("ROLLBACK", ())
            raise

    async def add_turn(
        self, cid: str, user: str, assistant: str, messages: list[dict[str, str]]
    ) -> None:
        await self._run(add_turn_steps(self.d, cid, user, assistant, messages, self.max_tokens))

    async def history(self, cid: str, budget: int | None) -> list[Any]:
        result: list[Any] = await self._run(history_steps(self.d, cid, budget))
        return result

    async def wm_set(self, scope: str, key: str, value: Any) -> None:
        await self._run(fact_set_steps(self.d, f"working:{scope}", key, value))

    async def wm_get(self, scope: str, key: str) -> Any:
        return await self._run(fact_get_steps(self.d, f"working:{scope}", key))

    async def wm_delete(self, scope: str, key: str) -> None:
        await self._run(fact_delete_steps(self.d, f"working:{scope}", key))


def _sqlite_connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=30000")
    for ddl in _SQLITE_SCHEMA:
        conn.execute(ddl)
    return conn


class RawSQLite(_SyncDriver):
    """stdlib sqlite3, WAL + synchronous=FULL, one transaction per operation."""

    name = "sqlite3"

    def __init__(self, path: str, *, max_tokens: int = UNLIMITED) -> None:
        self.d = Dialect("sqlite")
        self.max_tokens = max_tokens
        self.conn = _sqlite_connect(path)

    def _execute(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()

    def _executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self.conn.executemany(sql, rows)

    def durability(self) -> dict[str, Any]:
        return {
            "journal_mode": self.conn.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": self.conn.execute("PRAGMA synchronous").fetchone()[0],
        }

    def close(self) -> None:
        self.conn.close()


class RawPostgres(_SyncDriver):
    """psycopg 3 (sync), autocommit with explicit BEGIN/COMMIT per operation."""

    name = "psycopg"

    def __init__(self, conninfo: str, schema: str, *, max_tokens: int = UNLIMITED) -> None:
        import psycopg

        self.d = Dialect("postgresql")
        self.max_tokens = max_tokens
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        self.conn.execute(f'SET search_path TO "{schema}"')
        for ddl in _PG_SCHEMA:
            self.conn.execute(ddl)

    def _execute(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(sql, params)
        return cur.fetchall() if cur.description is not None else []

    def _executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(sql, rows)

    def durability(self) -> dict[str, Any]:
        row = self.conn.execute("SHOW synchronous_commit").fetchone()
        return {"synchronous_commit": row[0] if row else None}

    def close(self) -> None:
        self.conn.close()


class AsyncRawSQLite(_AsyncDriver):
    """aiosqlite, same pragmas and statements as :class:`RawSQLite`."""

    name = "aiosqlite"

    def __init__(self, path: str, *, max_tokens: int = UNLIMITED) -> None:
        self.d = Dialect("sqlite")
        self.max_tokens = max_tokens
        self.path = path
        self.conn: Any = None

    async def open(self) -> None:
        import aiosqlite

        self.conn = await aiosqlite.connect(self.path, isolation_level=None)
        for pragma in ("journal_mode=WAL", "synchronous=FULL", "busy_timeout=30000"):
            await self.conn.execute(f"PRAGMA {pragma}")
        for ddl in _SQLITE_SCHEMA:
            await self.conn.execute(ddl)

    async def _execute(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        async with self.conn.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


class AsyncRawPostgres(_AsyncDriver):
    """psycopg 3 AsyncConnection, same statements as :class:`RawPostgres`."""

    name = "psycopg async"

    def __init__(self, conninfo: str, schema: str, *, max_tokens: int = UNLIMITED) -> None:
        self.d = Dialect("postgresql")
        self.max_tokens = max_tokens
        self.conninfo = conninfo
        self.schema = schema
        self.conn: Any = None

    async def open(self) -> None:
        import psycopg

        self.conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
        await self.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
        await self.conn.execute(f'SET search_path TO "{self.schema}"')
        for ddl in _PG_SCHEMA:
            await self.conn.execute(ddl)

    async def _execute(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        cur = await self.conn.execute(sql, params)
        return list(await cur.fetchall()) if cur.description is not None else []

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
