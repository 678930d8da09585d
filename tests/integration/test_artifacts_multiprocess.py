"""Several processes increment one JSON counter with compare-and-set (issue 12).

Each worker process (a fork of the suite's fork server, ``tests/forked.py``:
nothing of the test process inherited but its arguments) opens its
OWN store on the shared database and a handle on the same workspace, waits
at a barrier, and then increments ``n.json`` until it has made
``INCREMENTS`` successful writes: read the file (value and sha in one read),
write ``value + 1`` with ``expected_sha=``, and on
:class:`~firefly_orm.artifacts.ShaMismatchError` read again.  Half the
workers use the async methods.

The parent checks what serial writes would leave: the final value equals the
number of successful writes, the audit log holds one row per write whose
``old_sha`` is the previous row's ``new_sha`` (one linear chain, no lost or
forked update), every write kept one version, and the file row's version
counts the writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue as queue_module
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import forked
import pytest

WORKERS = 4
INCREMENTS = 15
BARRIER_TIMEOUT = 120.0
RESULT_TIMEOUT = 300.0
WORKSPACE = "counter"
COUNTER = "n.json"

pytestmark = pytest.mark.slow


def _open_store(kind: str, location: str, name: str | None) -> Any:
    if kind == "sqlite":
        from firefly_orm.sql import SQLiteStore

        return SQLiteStore(location)
    if kind == "file":
        from firefly_orm.file_store import FileStore

        return FileStore(location)
    if kind == "mongo":
        from firefly_orm.mongo import MongoDBStore

        return MongoDBStore(location, database=name or "artifacts_mp")
    from firefly_orm.sql import PostgreSQLStore

    return PostgreSQLStore(location, schema_name=name, pool_size=2, pool_min_size=0)


def _increments_sync(ws: Any) -> int:
    from firefly_orm.artifacts import ShaMismatchError

    conflicts = done = 0
    while done < INCREMENTS:
        found = ws.read(COUNTER)
        try:
            ws.write_json(COUNTER, found.json() + 1, expected_sha=found.info.sha256, actor="w")
        except ShaMismatchError:
            conflicts += 1
            continue
        done += 1
    return conflicts


async def _increments_async(ws: Any) -> int:
    from firefly_orm.artifacts import ShaMismatchError

    conflicts = done = 0
    while done < INCREMENTS:
        found = await ws.async_read(COUNTER)
        try:
            await ws.async_write_json(
                COUNTER, found.json() + 1, expected_sha=found.info.sha256, actor="w"
            )
        except ShaMismatchError:
            conflicts += 1
            continue
        done += 1
    return conflicts


def _worker(
    kind: str, location: str, name: str | None, index: int, barrier: Any, results: Any
) -> None:
    """Make ``INCREMENTS`` successful increments; report ``("ok", index, conflicts)``."""
    store = None
    try:
        from firefly_orm.artifacts import Artifacts

        store = _open_store(kind, location, name)
        ws = Artifacts(store=store).workspace(WORKSPACE, keep_versions=True)
        barrier.wait(BARRIER_TIMEOUT)
        conflicts = asyncio.run(_increments_async(ws)) if index % 2 else _increments_sync(ws)
        results.put(("ok", index, conflicts))
    except BaseException:
        results.put(("error", index, traceback.format_exc()))
        with contextlib.suppress(Exception):
            barrier.abort()
    finally:
        _close(store)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        "file",
        pytest.param("mongo", marks=pytest.mark.mongo),
    ]
)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, Any]]:
    kind = str(request.param)
    name = "amp_" + uuid.uuid4().hex[:10]
    if kind == "sqlite":
        yield kind, str(tmp_path / "shared.sqlite3"), None
    elif kind == "file":
        yield kind, str(tmp_path / "files"), None
    elif kind == "mongo":
        url = str(request.getfixturevalue("mongo_url"))
        yield kind, url, name
        from dbutil import drop_mongo_database

        drop_mongo_database(url, name)
    else:
        url = str(request.getfixturevalue("postgres_url"))
        admin = request.getfixturevalue("postgres_admin_engine")
        yield kind, url, name
        from dbutil import drop_schema

        drop_schema(admin, name)


def test_processes_incrementing_a_counter_with_cas_lose_no_write(
    database: tuple[str, str, Any],
) -> None:
    from firefly_orm.artifacts import Artifacts

    kind, location, name = database
    store = _open_store(kind, location, name)
    try:
        if hasattr(store, "initialize"):
            store.initialize()
        ws = Artifacts(store=store).create(WORKSPACE, keep_versions=True)
        ws.write_json(COUNTER, 0, expected_sha="", actor="setup")
        context = forked.context()
        barrier = context.Barrier(WORKERS)
        results = context.Queue()
        processes = [
            context.Process(target=_worker, args=(kind, location, name, i, barrier, results))
            for i in range(WORKERS)
        ]
        for process in processes:
            process.start()
        outcomes: list[tuple[str, int, Any]] = []
        try:
            for _ in processes:
                outcomes.append(results.get(timeout=RESULT_TIMEOUT))
        except queue_module.Empty:
            pytest.fail(f"workers did not report within {RESULT_TIMEOUT}s: {outcomes}")
        finally:
            for process in processes:
                process.join(timeout=30)
                if process.is_alive():
                    process.kill()
        errors = [o for o in outcomes if o[0] == "error"]
        assert not errors, "\n".join(str(e[2]) for e in errors)
        conflicts = sum(o[2] for o in outcomes)
        writes = WORKERS * INCREMENTS
        final = ws.read(COUNTER)
        assert final is not None
        log = ws.audit_log()
        print(
            f"\n[{kind}] {WORKERS} processes x {INCREMENTS} increments: final={final.json()} "
            f"conflicts retried={conflicts} audit rows={len(log)}"
        )
        assert final.json() == writes
        assert final.info.version == writes + 1
        assert len(log) == writes + 1
        assert [r.op for r in log] == ["create"] + ["update"] * writes
        for before, after in itertools.pairwise(log):
            assert after.old_sha == before.new_sha, "the audit chain forks: an update was lost"
        assert log[-1].new_sha == final.info.sha256
        history = ws.history(COUNTER)
        assert len(history) == writes + 1
        assert sorted(h.version for h in history) == list(range(1, writes + 2))
    finally:
        _close(store)


def _close(store: Any) -> None:
    close = getattr(store, "close", None)
    if close is not None:
        close()
