"""A SQLite file store holds one connection per thread (``firefly_orm.sql._held``).

Counted through the pool's own events on a real SQLite file: ``checkout``
(a connection taken from the pool), ``detach`` (one taken out of the pool to
be held) and ``close_detached`` (a held one closed).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from firefly_orm import MemoryEntry
from firefly_orm.errors import ConcurrencyError, StoreError
from firefly_orm.sql import SQLAlchemyStore, SQLiteStore
from firefly_orm.working import WorkingMemory

POOL_EVENTS = ("checkout", "detach", "close_detached")


class PoolEvents:
    """Counts the pool events of one engine."""

    def __init__(self, engine: sa.Engine) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        for name in POOL_EVENTS:
            sa.event.listen(engine.pool, name, self._counter(name))

    def _counter(self, name: str) -> Callable[..., None]:
        def count(*_args: object) -> None:
            with self._lock:
                self.counts[name] += 1

        return count

    def __getitem__(self, name: str) -> int:
        return self.counts[name]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "held.sqlite3")
    store.initialize()
    yield store
    store.close()


def _events(store: SQLAlchemyStore) -> PoolEvents:
    return PoolEvents(store.engine)


NS = "held"


def _entry(key: str, value: object = 1) -> MemoryEntry:
    return MemoryEntry(key=key, content={"v": value})


def _write_lock_free(path: Path) -> bool:
    """Whether another connection takes the file's write lock at once."""
    other = sqlite3.connect(path, timeout=0.5, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


def test_a_threads_operations_share_one_connection(store: SQLiteStore) -> None:
    events = _events(store)
    working = WorkingMemory(store=store, scope_id="s")
    for i in range(20):
        working.set(f"k{i}", i)
        assert working.get(f"k{i}") == i
    with store.unit_of_work() as uow:
        uow.entries.save(NS, _entry("a"))
        uow.commit()
    assert store.load_by_key(NS, "a") is not None
    # One connection taken out of the pool, once; no checkout per operation.
    assert events["detach"] == 1
    assert events["checkout"] == 1
    assert events["close_detached"] == 0


def test_an_operation_inside_a_unit_of_work_takes_a_pooled_connection(
    store: SQLiteStore,
) -> None:
    store.save(NS, _entry("a", 1))
    events = _events(store)
    with store.unit_of_work(read_only=True) as uow:
        assert uow.entries.get_by_key(NS, "a") is not None
        # The thread's connection is the unit of work's: this read checks one out.
        before = events["checkout"]
        assert store.load_by_key(NS, "a") is not None
        assert events["checkout"] == before + 1
    # Back to the held connection afterwards.
    before = events["checkout"]
    assert store.load_by_key(NS, "a") is not None
    assert events["checkout"] == before


def test_a_failed_unit_of_work_leaves_the_connection_clean(store: SQLiteStore) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom), store.unit_of_work() as uow:
        uow.entries.save(NS, _entry("lost"))
        raise Boom
    # Rolled back, and the write lock is free: another store on the file writes.
    other = SQLiteStore(store.path)
    try:
        other.save(NS, _entry("other"))
    finally:
        other.close()
    assert store.load_by_key(NS, "lost") is None
    store.save(NS, _entry("kept"))
    assert store.load_by_key(NS, "kept") is not None


def test_a_bad_write_does_not_poison_the_held_connection(store: SQLiteStore) -> None:
    events = _events(store)
    store.save(NS, _entry("a"))
    # The version check refuses a stale write: the unit of work fails and rolls back.
    with pytest.raises(ConcurrencyError), store.unit_of_work() as uow:
        uow.entries.save(NS, _entry("a"), expected_version=5)
    store.save(NS, _entry("b"))
    assert store.load_by_key(NS, "b") is not None
    assert events["detach"] == 1


def test_an_invalidated_connection_is_replaced(store: SQLiteStore) -> None:
    store.save(NS, _entry("a"))
    events = _events(store)
    with store.unit_of_work(read_only=True) as uow:
        conn = uow.target
        assert isinstance(conn, sa.Connection)
        conn.invalidate()
    assert events["detach"] == 0
    assert _write_lock_free(store.path)
    assert store.load_by_key(NS, "a") is not None
    assert events["detach"] == 1  # a new one for the thread
    assert store.load_by_key(NS, "a") is not None
    assert events["detach"] == 1


def test_connections_of_ended_threads_are_closed(store: SQLiteStore) -> None:
    store.save(NS, _entry("a"))
    events = _events(store)

    def work() -> None:
        assert store.load_by_key(NS, "a") is not None

    for _ in range(5):
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    # Each thread held one; each new thread closed those of the ended ones.
    assert events["detach"] == 5
    assert events["close_detached"] == 4
    store.close()  # the last thread's and this thread's
    assert events["close_detached"] == 6


def test_more_threads_than_the_pool_holds_all_write(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "many.sqlite3", engine_kwargs={"pool_timeout": 2})
    store.initialize()
    threads = 24  # the default pool: 5 + 10 overflow
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            barrier.wait()
            for i in range(5):
                store.save(NS, _entry(f"t{n}-{i}", i))
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == []
        assert len(store.load(NS)) == threads * 5
    finally:
        store.close()


def test_close_closes_busy_connections_when_given_back(store: SQLiteStore) -> None:
    store.save(NS, _entry("a"))
    events = _events(store)
    inside, release = threading.Event(), threading.Event()

    def work() -> None:
        with store.unit_of_work(read_only=True) as uow:
            assert uow.entries.get_by_key(NS, "a") is not None
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=work)
    thread.start()
    assert inside.wait(10)
    store.close()  # this thread's idle one closes now; the other thread's is in use
    assert events["close_detached"] == 1
    release.set()
    thread.join()
    assert events["close_detached"] == 2
    # The store opens again on next use.
    assert store.load_by_key(NS, "a") is not None


def test_async_operations_hold_their_worker_threads_connections(store: SQLiteStore) -> None:
    events = _events(store)
    working = WorkingMemory(store=store, scope_id="s")

    async def work() -> None:
        for i in range(30):
            await working.async_set(f"k{i}", i)
            assert await working.async_get(f"k{i}") == i

    asyncio.run(work())
    # At most one per worker thread; far fewer than the 60 operations.
    assert events["checkout"] == events["detach"] <= (os.cpu_count() or 1) + 4


def test_a_callers_engine_is_never_held(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.sqlite3'}")
    store = SQLAlchemyStore(engine=engine, migrate=True)
    store.initialize()
    events = PoolEvents(engine)
    for i in range(5):
        store.save(NS, _entry(f"k{i}"))
    assert events["detach"] == 0
    assert events["checkout"] == 5
    store.close()
    engine.dispose()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_use_its_parents_connection(store: SQLiteStore) -> None:
    store.save(NS, _entry("a"))
    events = _events(store)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own connections, the parent's left alone
        code = 1
        try:
            detached, checkouts = events["detach"], events["checkout"]
            store.save(NS, _entry("child"))
            ok = (
                store.load_by_key(NS, "child") is not None
                and events["detach"] == detached
                and events["checkout"] == checkouts + 2  # the pool's, not the parent's
            )
            store.close()  # leaves the parent's held connection alone
            code = 0 if ok else 2
        finally:
            os.write(write, bytes([code]))
            os._exit(code)
    os.close(write)
    status = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert status == bytes([0])
    assert store.load_by_key(NS, "child") is not None
    store.save(NS, _entry("parent"))
    assert events["detach"] == 0
    assert events["close_detached"] == 0


def test_an_interrupt_after_begin_immediate_leaves_no_lock(store: SQLiteStore) -> None:
    store.save(NS, _entry("a"))

    def interrupt(conn: sa.Connection) -> None:  # runs after the store's BEGIN IMMEDIATE
        raise KeyboardInterrupt

    sa.event.listen(store.engine, "begin", interrupt)
    try:
        with pytest.raises(KeyboardInterrupt), store.unit_of_work() as uow:
            uow.entries.save(NS, _entry("never"))
    finally:
        sa.event.remove(store.engine, "begin", interrupt)
    assert _write_lock_free(store.path)
    store.save(NS, _entry("b"))
    assert store.load_by_key(NS, "never") is None
    assert store.load_by_key(NS, "b") is not None


def test_a_failed_commit_leaves_no_lock(store: SQLiteStore) -> None:
    with store.unit_of_work() as uow:
        target = uow.target
        assert isinstance(target, sa.Connection)
        target.exec_driver_sql("CREATE TABLE parent(id INTEGER PRIMARY KEY)")
        target.exec_driver_sql(
            "CREATE TABLE child(pid INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)"
        )
        uow.commit()
    # On the thread's held connection, outside a transaction (where SQLite takes it).
    store._engines.run("single", lambda conn: conn.exec_driver_sql("PRAGMA foreign_keys=ON"))
    events = _events(store)
    with pytest.raises(StoreError), store.unit_of_work() as uow:
        target = uow.target
        assert isinstance(target, sa.Connection)
        target.exec_driver_sql("INSERT INTO child VALUES (42)")  # checked at COMMIT
        uow.commit()
    assert _write_lock_free(store.path)
    store.save(NS, _entry("after"))
    assert store.load_by_key(NS, "after") is not None
    assert events["detach"] <= 1


def test_a_connection_its_user_closed_or_changed_is_not_reused(store: SQLiteStore) -> None:
    store.save(NS, _entry("a"))
    events = _events(store)
    with store.unit_of_work(read_only=True) as uow:
        assert isinstance(uow.target, sa.Connection)
        uow.target.close()
    assert store.load_by_key(NS, "a") is not None
    assert events["detach"] == 1
    with store.unit_of_work(read_only=True) as uow:
        assert isinstance(uow.target, sa.Connection)
        uow.target.execution_options(mine=True)
    assert store.load_by_key(NS, "a") is not None
    assert events["detach"] == 2
    assert store.load_by_key(NS, "a") is not None
    assert events["detach"] == 2


def test_close_while_threads_read_never_hands_out_a_closed_connection(
    store: SQLiteStore,
) -> None:
    store.save(NS, _entry("a"))
    stop = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        while not stop.is_set():
            try:
                assert store.load_by_key(NS, "a") is not None
            except BaseException as exc:  # reported below
                errors.append(exc)
                return

    readers = [threading.Thread(target=read) for _ in range(3)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for reader in readers:
            reader.start()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not errors:
            store.close()
            time.sleep(0.001)
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        for reader in readers:
            reader.join()
    assert errors == []
