"""W7: artifact compare-and-set writes and reads against the same work done by hand.

The library side is :class:`firefly_orm.artifacts.ArtifactWorkspace`:
``write_json(path, value, expected_sha=sha)`` (one unit of work: the file row,
its audit row and, with ``keep_versions=True``, a version row) and
``read(path)`` (the file's bytes and metadata).  The baseline is what a user
would write for a compare-and-set file table with an audit log, on the raw
driver:

* a write: ``BEGIN IMMEDIATE`` (SQLite) / ``BEGIN`` (PostgreSQL); ``SELECT sha,
  version FROM files WHERE ws = ? AND path = ?`` (``FOR UPDATE`` on
  PostgreSQL); compare with the expected sha (a mismatch rolls back and
  raises); ``UPDATE`` (or ``INSERT``) the file row with the new content, sha,
  size, version, actor, reason and time; ``INSERT`` the audit row (``+versions``:
  and the version row); ``COMMIT``.  The JSON text (``json.dumps(indent=2,
  sort_keys=True)``, as the library writes it) and its sha256 are computed in
  the timed call on both sides.
* a read: ``SELECT content, sha FROM files WHERE ws = ? AND path = ?``.
* MongoDB (pymongo): the same in one transaction when the server has them (the
  library detects the same), else ordered conditional writes: ``find_one`` the
  file, ``update_one`` conditioned on the version read (or ``insert_one``), then
  ``insert_one`` the audit (and version) document.

The SQL baseline classes extend :mod:`bench.raw`'s (same connections, pragmas
and step drivers, so the durability settings are the other workloads'; their
conversation tables stay empty).  The SQL is written once as step generators,
fed by the sync and the async drivers.

Every client remembers the sha it last wrote for each path and passes it as
``expected_sha`` (an agent that read or wrote the file before), so every timed
write is a successful compare-and-set of an existing file.  Each step of the
timed loop is one write, one write with versions and one read of a random
file, each interleaved with its counterpart; the order alternates.  Untimed
checks: every write returns the same sha on both sides; every read returns the
same content and sha on both sides, and that content is the value last
written; a stale ``expected_sha`` is refused on both sides with the same
current sha and writes nothing; at the end both sides hold as many audit and
version rows as writes.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from bench import raw
from bench.common import Row, Sizes, TextPool
from bench.raw import Dialect, Steps
from bench.workloads import (
    Call,
    CheckFailed,
    Samples,
    _ameasure,
    _latency_row,
    _measure,
)

#: The workspace written without and with version snapshots.
WORKSPACE = "bench-w7"
VERSIONED = "bench-w7-versions"
#: Who writes and why (kept in the file row and the audit row on both sides).
ACTOR = "bench"
REASON = "w7"
#: A well-formed sha256 no file has: the untimed stale-write check passes it.
STALE_SHA = "0" * 64
#: The three measured operations, in the order each step runs them.
OPS = ("write", "write_versioned", "read")
#: One planned operation: (op, path, value written or None, value a read must find).
Op = tuple[str, str, Any, Any]
TITLES = {
    "write": "W7 CAS write",
    "write_versioned": "W7 CAS write +versions",
    "read": "W7 read",
}


class RawShaMismatch(Exception):
    """The baseline's compare-and-set did not hold (the transaction was rolled back)."""

    def __init__(self, path: str, expected: str, current: str) -> None:
        super().__init__(f"{path}: expected sha {expected[:12]!r}, current {current[:12]!r}")
        self.current_sha = current


def json_body(value: Any) -> tuple[str, str, int]:
    """(text, sha256, size in bytes) of a JSON file holding ``value``, as the library writes it."""
    text = json.dumps(value, indent=2, sort_keys=True, allow_nan=False)
    data = text.encode("utf-8")
    return text, hashlib.sha256(data).hexdigest(), len(data)


# --------------------------------------------------------------------------- the SQL baseline

_SQLITE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS files (
        ws TEXT NOT NULL, path TEXT NOT NULL, kind TEXT NOT NULL, content TEXT NOT NULL,
        sha TEXT NOT NULL, size INTEGER NOT NULL, version INTEGER NOT NULL,
        actor TEXT NOT NULL, reason TEXT NOT NULL, updated_at TEXT NOT NULL,
        PRIMARY KEY (ws, path))""",
    """CREATE TABLE IF NOT EXISTS audit (
        id INTEGER PRIMARY KEY, ws TEXT NOT NULL, at TEXT NOT NULL, op TEXT NOT NULL,
        path TEXT NOT NULL, old_sha TEXT NOT NULL, new_sha TEXT NOT NULL,
        actor TEXT NOT NULL, reason TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS audit_ws ON audit (ws, id)",
    """CREATE TABLE IF NOT EXISTS versions (
        ws TEXT NOT NULL, path TEXT NOT NULL, version INTEGER NOT NULL, sha TEXT NOT NULL,
        content TEXT NOT NULL, actor TEXT NOT NULL, reason TEXT NOT NULL, at TEXT NOT NULL,
        PRIMARY KEY (ws, path, version))""",
)

_PG_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS files (
        ws TEXT NOT NULL, path TEXT NOT NULL, kind TEXT NOT NULL, content TEXT NOT NULL,
        sha TEXT NOT NULL, size BIGINT NOT NULL, version BIGINT NOT NULL,
        actor TEXT NOT NULL, reason TEXT NOT NULL, updated_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (ws, path))""",
    """CREATE TABLE IF NOT EXISTS audit (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ws TEXT NOT NULL,
        at TIMESTAMPTZ NOT NULL, op TEXT NOT NULL, path TEXT NOT NULL, old_sha TEXT NOT NULL,
        new_sha TEXT NOT NULL, actor TEXT NOT NULL, reason TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS audit_ws ON audit (ws, id)",
    """CREATE TABLE IF NOT EXISTS versions (
        ws TEXT NOT NULL, path TEXT NOT NULL, version BIGINT NOT NULL, sha TEXT NOT NULL,
        content TEXT NOT NULL, actor TEXT NOT NULL, reason TEXT NOT NULL,
        at TIMESTAMPTZ NOT NULL, PRIMARY KEY (ws, path, version))""",
)


def cas_write_steps(
    d: Dialect, ws: str, path: str, value: Any, expected: str, keep_versions: bool
) -> Steps:
    """One compare-and-set write with its audit (and version) row; returns the new sha."""
    text, sha, size = json_body(value)
    now = d.now()
    yield d.begin_write, ()
    rows = yield (
        d.q("SELECT sha, version FROM files WHERE ws = ? AND path = ?" + d.lock),
        (ws, path),
    )
    old_sha, old_version = rows[0] if rows else ("", 0)
    if expected != old_sha:
        raise RawShaMismatch(path, expected, old_sha)
    version = old_version + 1
    if rows:
        yield (
            d.q(
                "UPDATE files SET kind = ?, content = ?, sha = ?, size = ?, version = ?, "
                "actor = ?, reason = ?, updated_at = ? WHERE ws = ? AND path = ?"
            ),
            ("json", text, sha, size, version, ACTOR, REASON, now, ws, path),
        )
    else:
        yield (
            d.q(
                "INSERT INTO files (ws, path, kind, content, sha, size, version, actor, reason, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (ws, path, "json", text, sha, size, version, ACTOR, REASON, now),
        )
    yield (
        d.q(
            "INSERT INTO audit (ws, at, op, path, old_sha, new_sha, actor, reason) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        (ws, now, "update" if rows else "create", path, old_sha, sha, ACTOR, REASON),
    )
    if keep_versions:
        yield (
            d.q(
                "INSERT INTO versions (ws, path, version, sha, content, actor, reason, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (ws, path, version, sha, text, ACTOR, REASON, now),
        )
    yield "COMMIT", ()
    return sha


def read_steps(d: Dialect, ws: str, path: str) -> Steps:
    """``(content, sha)`` of a file, ``None`` when there is none (one statement)."""
    rows = yield d.q("SELECT content, sha FROM files WHERE ws = ? AND path = ?"), (ws, path)
    return (rows[0][0], rows[0][1]) if rows else None


def counts_steps(d: Dialect) -> Steps:
    """Untimed: ``(audit rows, version rows)``."""
    audit = yield "SELECT count(*) FROM audit", ()
    versions = yield "SELECT count(*) FROM versions", ()
    return int(audit[0][0]), int(versions[0][0])


class _Known:
    """The sha each client last wrote per (workspace, path): its next ``expected_sha``."""

    def __init__(self) -> None:
        self.known: dict[tuple[str, str], str] = {}

    def expected(self, ws: str, path: str) -> str:
        return self.known.get((ws, path), "")


class _SyncRawArtifacts(_Known):
    d: Dialect
    _run: Callable[[Steps], Any]

    def _write(self, ws: str, keep: bool, path: str, value: Any) -> str:
        steps = cas_write_steps(self.d, ws, path, value, self.expected(ws, path), keep)
        sha: str = self._run(steps)
        self.known[ws, path] = sha
        return sha

    def write(self, path: str, value: Any) -> str:
        return self._write(WORKSPACE, False, path, value)

    def write_versioned(self, path: str, value: Any) -> str:
        return self._write(VERSIONED, True, path, value)

    def read(self, path: str) -> tuple[str, str] | None:
        found: tuple[str, str] | None = self._run(read_steps(self.d, WORKSPACE, path))
        return found

    def write_stale(self, path: str, value: Any, stale: str) -> str:
        """Untimed: a write with a stale sha; the current sha the refusal names."""
        try:
            self._run(cas_write_steps(self.d, WORKSPACE, path, value, stale, False))
        except RawShaMismatch as exc:
            return exc.current_sha
        raise CheckFailed(f"W7 raw: a stale expected_sha was accepted for {path!r}")

    def counts(self) -> tuple[int, int]:
        found: tuple[int, int] = self._run(counts_steps(self.d))
        return found


class RawSQLiteArtifacts(_SyncRawArtifacts, raw.RawSQLite):
    """stdlib sqlite3 (the W1-W3 baseline's connection: WAL, synchronous=FULL)."""

    def __init__(self, path: str) -> None:
        raw.RawSQLite.__init__(self, path)
        _Known.__init__(self)
        for ddl in _SQLITE_SCHEMA:
            self.conn.execute(ddl)


class RawPostgresArtifacts(_SyncRawArtifacts, raw.RawPostgres):
    """psycopg 3 (the W1-W3 baseline's connection: autocommit, explicit BEGIN/COMMIT)."""

    def __init__(self, conninfo: str, schema: str) -> None:
        raw.RawPostgres.__init__(self, conninfo, schema)
        _Known.__init__(self)
        for ddl in _PG_SCHEMA:
            self.conn.execute(ddl)


class _AsyncRawArtifacts(_Known):
    d: Dialect
    _run: Callable[[Steps], Any]

    async def _write(self, ws: str, keep: bool, path: str, value: Any) -> str:
        steps = cas_write_steps(self.d, ws, path, value, self.expected(ws, path), keep)
        sha: str = await self._run(steps)
        self.known[ws, path] = sha
        return sha

    async def write(self, path: str, value: Any) -> str:
        return await self._write(WORKSPACE, False, path, value)

    async def write_versioned(self, path: str, value: Any) -> str:
        return await self._write(VERSIONED, True, path, value)

    async def read(self, path: str) -> tuple[str, str] | None:
        found: tuple[str, str] | None = await self._run(read_steps(self.d, WORKSPACE, path))
        return found

    async def write_stale(self, path: str, value: Any, stale: str) -> str:
        try:
            await self._run(cas_write_steps(self.d, WORKSPACE, path, value, stale, False))
        except RawShaMismatch as exc:
            return exc.current_sha
        raise CheckFailed(f"W7 raw: a stale expected_sha was accepted for {path!r}")

    async def counts(self) -> tuple[int, int]:
        found: tuple[int, int] = await self._run(counts_steps(self.d))
        return found


class AsyncRawSQLiteArtifacts(_AsyncRawArtifacts, raw.AsyncRawSQLite):
    """aiosqlite, same pragmas and statements as :class:`RawSQLiteArtifacts`."""

    def __init__(self, path: str) -> None:
        raw.AsyncRawSQLite.__init__(self, path)
        _Known.__init__(self)

    async def open(self) -> None:
        await raw.AsyncRawSQLite.open(self)
        for ddl in _SQLITE_SCHEMA:
            await self.conn.execute(ddl)


class AsyncRawPostgresArtifacts(_AsyncRawArtifacts, raw.AsyncRawPostgres):
    """psycopg 3 AsyncConnection, same statements as :class:`RawPostgresArtifacts`."""

    def __init__(self, conninfo: str, schema: str) -> None:
        raw.AsyncRawPostgres.__init__(self, conninfo, schema)
        _Known.__init__(self)

    async def open(self) -> None:
        await raw.AsyncRawPostgres.open(self)
        for ddl in _PG_SCHEMA:
            await self.conn.execute(ddl)


# --------------------------------------------------------------------------- the MongoDB baseline


class RawMongoArtifacts(_Known):
    """pymongo: a files collection (``_id`` = workspace and path), audit and versions."""

    name = "pymongo"

    def __init__(self, url: str, database: str) -> None:
        from pymongo import ASCENDING, MongoClient

        self.client: Any = MongoClient(url, tz_aware=True)
        self.db = self.client[database]
        self.db.audit.create_index([("ws", ASCENDING), ("_id", ASCENDING)], name="ix_ws")
        self.db.versions.create_index(
            [("ws", ASCENDING), ("path", ASCENDING), ("version", ASCENDING)],
            name="ux_version",
            unique=True,
        )
        hello = self.client.admin.command("hello")
        self.transactions = "logicalSessionTimeoutMinutes" in hello and (
            "setName" in hello or hello.get("msg") == "isdbgrid"
        )
        super().__init__()

    def _in_transaction(self, fn: Callable[[Any], str]) -> str:
        if not self.transactions:
            return fn(None)
        with self.client.start_session() as session:
            result: str = session.with_transaction(fn)
            return result

    def _cas(self, ws: str, keep: bool, path: str, value: Any, expected: str) -> str:
        text, sha, size = json_body(value)
        now = datetime.now(UTC)
        fid = f"{ws}/{path}"

        def body(session: Any) -> str:
            old = self.db.files.find_one({"_id": fid}, {"sha": 1, "version": 1}, session=session)
            old_sha, old_version = (old["sha"], old["version"]) if old else ("", 0)
            if expected != old_sha:
                raise RawShaMismatch(path, expected, old_sha)
            fields = {
                "kind": "json",
                "content": text,
                "sha": sha,
                "size": size,
                "version": old_version + 1,
                "actor": ACTOR,
                "reason": REASON,
                "updated_at": now,
            }
            if old:
                done = self.db.files.update_one(
                    {"_id": fid, "version": old_version}, {"$set": fields}, session=session
                )
                if done.matched_count != 1:  # a lost race: re-read to name the current sha
                    current = self.db.files.find_one({"_id": fid}, {"sha": 1}, session=session)
                    raise RawShaMismatch(path, expected, current["sha"] if current else "")
            else:
                self.db.files.insert_one(
                    {"_id": fid, "ws": ws, "path": path, **fields}, session=session
                )
            self.db.audit.insert_one(
                {
                    "ws": ws,
                    "at": now,
                    "op": "update" if old else "create",
                    "path": path,
                    "old_sha": old_sha,
                    "new_sha": sha,
                    "actor": ACTOR,
                    "reason": REASON,
                },
                session=session,
            )
            if keep:
                self.db.versions.insert_one(
                    {
                        "ws": ws,
                        "path": path,
                        "version": old_version + 1,
                        "sha": sha,
                        "content": text,
                        "actor": ACTOR,
                        "reason": REASON,
                        "at": now,
                    },
                    session=session,
                )
            return sha

        return self._in_transaction(body)

    def _write(self, ws: str, keep: bool, path: str, value: Any) -> str:
        sha = self._cas(ws, keep, path, value, self.expected(ws, path))
        self.known[ws, path] = sha
        return sha

    def write(self, path: str, value: Any) -> str:
        return self._write(WORKSPACE, False, path, value)

    def write_versioned(self, path: str, value: Any) -> str:
        return self._write(VERSIONED, True, path, value)

    def read(self, path: str) -> tuple[str, str] | None:
        doc = self.db.files.find_one({"_id": f"{WORKSPACE}/{path}"}, {"content": 1, "sha": 1})
        return None if doc is None else (doc["content"], doc["sha"])

    def write_stale(self, path: str, value: Any, stale: str) -> str:
        try:
            self._cas(WORKSPACE, False, path, value, stale)
        except RawShaMismatch as exc:
            return exc.current_sha
        raise CheckFailed(f"W7 raw: a stale expected_sha was accepted for {path!r}")

    def counts(self) -> tuple[int, int]:
        return self.db.audit.count_documents({}), self.db.versions.count_documents({})

    def durability(self) -> dict[str, Any]:
        return {"write_concern": self.db.write_concern.document, "transactions": self.transactions}

    def close(self) -> None:
        self.client.close()


# --------------------------------------------------------------------------- the library


class _OursBase(_Known):
    """``Artifacts(store=store)``: one workspace without versions, one with."""

    name = "firefly_orm"

    def __init__(self, store: Any) -> None:
        from firefly_orm.artifacts import Artifacts

        super().__init__()
        self.store = store
        self.artifacts = Artifacts(store=store)
        self.plain = self.artifacts.workspace(WORKSPACE)
        self.versioned = self.artifacts.workspace(VERSIONED, keep_versions=True)


class OursArtifacts(_OursBase):
    """The sync API: ``write_json(..., expected_sha=)`` and ``read``."""

    def open(self) -> None:
        for ws in (self.plain, self.versioned):
            self.artifacts.get_or_create(ws.key)

    def _write(self, ws: Any, path: str, value: Any) -> str:
        info = ws.write_json(
            path, value, actor=ACTOR, reason=REASON, expected_sha=self.expected(ws.key, path)
        )
        sha: str = info.sha256
        self.known[ws.key, path] = sha
        return sha

    def write(self, path: str, value: Any) -> str:
        return self._write(self.plain, path, value)

    def write_versioned(self, path: str, value: Any) -> str:
        return self._write(self.versioned, path, value)

    def read(self, path: str) -> Any:
        return self.plain.read(path)

    def write_stale(self, path: str, value: Any, stale: str) -> str:
        from firefly_orm.artifacts import ShaMismatchError

        try:
            self.plain.write_json(path, value, actor=ACTOR, reason=REASON, expected_sha=stale)
        except ShaMismatchError as exc:
            return str(exc.current_sha)
        raise CheckFailed(f"W7 ours: a stale expected_sha was accepted for {path!r}")

    def counts(self, paths: Sequence[str]) -> tuple[int, int]:
        audit = len(self.plain.audit_log()) + len(self.versioned.audit_log())
        return audit, sum(len(self.versioned.history(p)) for p in paths)

    def close(self) -> None:
        self.store.close()


class AsyncOursArtifacts(_OursBase):
    """The async API: ``async_write_json(..., expected_sha=)`` and ``async_read``."""

    name = "firefly_orm async"

    async def open(self) -> None:
        await self.store.async_initialize()
        for ws in (self.plain, self.versioned):
            await self.artifacts.async_get_or_create(ws.key)

    async def _write(self, ws: Any, path: str, value: Any) -> str:
        info = await ws.async_write_json(
            path, value, actor=ACTOR, reason=REASON, expected_sha=self.expected(ws.key, path)
        )
        sha: str = info.sha256
        self.known[ws.key, path] = sha
        return sha

    async def write(self, path: str, value: Any) -> str:
        return await self._write(self.plain, path, value)

    async def write_versioned(self, path: str, value: Any) -> str:
        return await self._write(self.versioned, path, value)

    async def read(self, path: str) -> Any:
        return await self.plain.async_read(path)

    async def write_stale(self, path: str, value: Any, stale: str) -> str:
        from firefly_orm.artifacts import ShaMismatchError

        try:
            await self.plain.async_write_json(
                path, value, actor=ACTOR, reason=REASON, expected_sha=stale
            )
        except ShaMismatchError as exc:
            return str(exc.current_sha)
        raise CheckFailed(f"W7 ours: a stale expected_sha was accepted for {path!r}")

    async def counts(self, paths: Sequence[str]) -> tuple[int, int]:
        audit = len(await self.plain.async_audit_log())
        audit += len(await self.versioned.async_audit_log())
        versions = 0
        for p in paths:
            versions += len(await self.versioned.async_history(p))
        return audit, versions

    async def close(self) -> None:
        await self.store.async_close()


class MongoOursArtifacts(OursArtifacts):
    """The library on :class:`~firefly_orm.mongo.MongoDBStore`."""

    def __init__(self, url: str, database: str) -> None:
        from firefly_orm.mongo import MongoDBStore

        super().__init__(MongoDBStore(url, database=database))

    def durability(self) -> dict[str, Any]:
        self.store.initialize()
        return {"transactions": self.store.uses_transactions}


# --------------------------------------------------------------------------- the plan


class Plan:
    """The W7 operations (deterministic for a seed).

    First (untimed) the creation of every file in both workspaces; then
    ``steps`` measured steps of (write, versioned write, read): files written
    round-robin, reads of random files; last (untimed) a stale write.
    """

    def __init__(self, sizes: Sizes, pool: TextPool, seed: int, steps: int) -> None:
        rng = random.Random(f"{seed}-w7")
        self.paths = [f"agent/notes-{n:02d}.json" for n in range(sizes.artifact_files)]
        self.pool = pool
        self.n = 0
        #: The value last written at each path of the plain workspace.
        self.latest: dict[str, Any] = {}
        #: Untimed: the first version of every file (``expected_sha=""``), both workspaces.
        self.creates = self._writes(self.paths)
        #: The measured steps: (write, versioned write, read of a random file).
        self.ops: list[Op] = []
        for step in range(steps):
            self.ops.extend(self._writes([self.paths[step % len(self.paths)]]))
            read = rng.choice(self.paths)
            self.ops.append(("read", read, None, self.latest[read]))
        #: Untimed, last: a write of the first file with a sha that is not its own.
        self.stale = (self.paths[0], self.value(self.paths[0]), STALE_SHA)

    @property
    def writes(self) -> int:
        """Writes per workspace (creates and timed)."""
        return len(self.paths) + sum(1 for op in self.ops if op[0] == "write")

    def latest_sha(self, path: str) -> str:
        """The sha of the file at ``path`` in the plain workspace after the plan."""
        return json_body(self.latest[path])[1]

    def _writes(self, paths: Sequence[str]) -> list[Op]:
        ops: list[Op] = []
        for path in paths:
            value = self.value(path)
            self.latest[path] = value
            ops.append(("write", path, value, None))
            ops.append(("write_versioned", path, self.value(path), None))
        return ops

    def value(self, path: str) -> dict[str, Any]:
        """A JSON document of about 400 bytes (as written: indented, sorted keys)."""
        self.n += 1
        text = self.pool.texts[self.n % len(self.pool.texts)]
        return {"path": path, "n": self.n, "notes": text, "tags": ["bench", f"w{self.n % 7}"]}


def _calls(ours: Any, base: Any, ops: Sequence[Op]) -> Iterator[Call]:
    for op, path, value, _expected in ops:
        args = (path,) if op == "read" else (path, value)
        yield getattr(ours, op), getattr(base, op), args


def _ours_read(found: Any) -> tuple[str, str] | None:
    return None if found is None else (found.data.decode("utf-8"), found.info.sha256)


def _check(ops: Sequence[Op], samples: Samples) -> None:
    """Every write gave the same sha on both sides; every read the same, expected, content."""
    for (op, path, value, expected), (mine, theirs) in zip(ops, samples.results, strict=True):
        if op == "read":
            if _ours_read(mine) != theirs or theirs is None:
                raise CheckFailed(f"W7 read {path!r}: ours {_ours_read(mine)} vs raw {theirs}")
            if json.loads(theirs[0]) != expected:
                raise CheckFailed(f"W7 read {path!r}: not the value last written")
        elif mine != theirs or mine != json_body(value)[1]:
            raise CheckFailed(f"W7 {op} {path!r}: ours sha {mine} vs raw {theirs}")


def _rows(backend: str, plan: Plan, samples: Samples, sizes: Sizes, **detail: Any) -> list[Row]:
    rows = []
    shape = (
        f"{len(plan.ops) // len(OPS)} steps of (CAS write, CAS write +versions, read), "
        f"{sizes.artifact_files} files of {json_body(plan.ops[0][2])[2]} bytes, interleaved"
    )
    for op in OPS:
        idx = [n for n, item in enumerate(plan.ops) if item[0] == op]
        row = _latency_row(
            TITLES[op],
            backend,
            [samples.ours[n] for n in idx],
            [samples.base[n] for n in idx],
            None,
            shape=shape,
            **detail,
        )
        row.kind = "info"
        rows.append(row)
    return rows


def _final_check(plan: Plan, stale: tuple[str, str], counts: tuple[Any, Any]) -> None:
    """The stale write was refused alike; both sides hold an audit (and version) row per write."""
    path = plan.stale[0]
    if stale[0] != stale[1] or stale[1] != plan.latest_sha(path):
        raise CheckFailed(f"W7 stale write {path!r}: ours names {stale[0]}, raw {stale[1]}")
    expected = (2 * plan.writes, plan.writes)
    if counts[0] != counts[1] or counts[1] != expected:
        raise CheckFailed(
            f"W7 (audit rows, version rows): ours {counts[0]}, raw {counts[1]}, expected {expected}"
        )


def w7_artifacts(
    make_pair: Callable[[str], tuple[Any, Any]],
    sizes: Sizes,
    pool: TextPool,
    backend: str,
    seed: int,
    durability: Callable[[Any, Any], dict[str, Any]] | None = None,
) -> list[Row]:
    """W7 (sync): CAS write, CAS write with versions and read latency, ours and raw."""
    ours, base = make_pair("w7")
    try:
        ours.open()
        plan = Plan(sizes, pool, seed, sizes.artifact_steps)
        _check(plan.creates, _measure(_calls(ours, base, plan.creates)))  # untimed warm-up
        samples = _measure(_calls(ours, base, plan.ops))
        _check(plan.ops, samples)
        stale = (ours.write_stale(*plan.stale), base.write_stale(*plan.stale))
        _final_check(plan, stale, (ours.counts(plan.paths), base.counts()))
        extra: dict[str, Any] = {}
        if durability is not None:
            extra["durability"] = durability(ours, base)
        return _rows(backend, plan, samples, sizes, **extra)
    finally:
        ours.close()
        base.close()


async def async_w7_artifacts(
    ours: Any, base: Any, sizes: Sizes, pool: TextPool, backend: str, seed: int
) -> list[Row]:
    """W7 through the async APIs (the same plan, awaited); ``ours``/``base`` are opened here."""
    await ours.open()
    await base.open()
    plan = Plan(sizes, pool, seed, sizes.async_artifact_steps)
    _check(plan.creates, await _ameasure(_calls(ours, base, plan.creates)))
    samples = await _ameasure(_calls(ours, base, plan.ops))
    _check(plan.ops, samples)
    stale = (await ours.write_stale(*plan.stale), await base.write_stale(*plan.stale))
    _final_check(plan, stale, (await ours.counts(plan.paths), await base.counts()))
    return _rows(backend, plan, samples, sizes)
