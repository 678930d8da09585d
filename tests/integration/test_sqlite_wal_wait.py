"""The WAL switch of an aiosqlite connection waits without stalling the event loop.

An async SQLite store's connect hook runs on the event loop's thread (SQLAlchemy
drives aiosqlite from a greenlet there).  When another connection holds the
write lock of a file still in rollback-journal mode, the hook waits for it
(``firefly_orm.sql._engines._switch_to_wal``); that wait must let the loop's
other tasks run, one of which may be the very task that releases the lock.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from firefly_orm import migrate
from firefly_orm.sql import SQLiteStore, _engines


async def test_async_initialize_waits_for_the_lock_with_the_loop_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task on the same loop releases the lock while async_initialize() waits for it."""
    # A lock never released fails in 3 s, not SQLite's 30 (a stalled loop would).
    monkeypatch.setattr(_engines, "SQLITE_BUSY_TIMEOUT_MS", 3000)
    path = tmp_path / "fresh.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # a migrator's write lock on a fresh file
    holder.execute("CREATE TABLE someone_elses (a)")
    ticks = 0

    async def release_later() -> None:
        nonlocal ticks
        for _ in range(20):  # 0.2 s of this loop's time
            await asyncio.sleep(0.01)
            ticks += 1
        holder.execute("COMMIT")

    # async_url=: aiosqlite, the native async driver (a plain SQLite store's async
    # methods run on its sync engine in worker threads, where waiting is harmless).
    store = SQLiteStore(path, async_url=f"sqlite+aiosqlite:///{path}")
    try:
        releaser = asyncio.create_task(release_later())
        started = time.monotonic()
        await store.async_initialize()
        waited = time.monotonic() - started
        await releaser
        assert ticks == 20
        assert 0.15 <= waited < 2.5  # it waited for the release, on a running loop
        assert migrate.check(f"sqlite:///{path}") == []
    finally:
        await store.async_close()
        holder.close()
