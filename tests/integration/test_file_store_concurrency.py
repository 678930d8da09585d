"""FileStore under concurrent writers: processes and threads lose no update.

Each increment is one unit of work over two namespaces (a counter and its mirror),
so it goes through a commit journal; one variant makes every write compact its
file first, so processes keep reading files another process has just rewritten.
The fast, single-writer FileStore tests live in ``tests/unit/test_file_store.py``
and ``tests/unit/test_file_store_log.py``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import forked
import pytest

from firefly_orm.entry import MemoryEntry, derived_entry_id
from firefly_orm.errors import ConcurrencyError
from firefly_orm.file_store import FileStore
from firefly_orm.file_store import _log as file_log

COUNTERS = ("counter", "counter-mirror")


def _process_worker(base: str, worker: int, count: int, barrier: Any, compact: bool) -> None:
    if compact:
        file_log.COMPACT_MIN_BYTES = 0
    store = FileStore(base)
    barrier.wait()
    for i in range(count):
        store.save("shared", MemoryEntry(key=f"w{worker}-{i}", content=i))
        _increment(store)


def _increment(store: FileStore) -> None:
    """Read-modify-write both counters in one unit of work, retrying on conflict."""
    while True:
        try:
            with store.unit_of_work() as uow:
                for namespace in COUNTERS:
                    counter_id = derived_entry_id(namespace, "n")
                    current = uow.entries.get(namespace, counter_id)
                    value = 0 if current is None else current.content
                    expected = 0 if current is None else current.version
                    new = MemoryEntry(entry_id=counter_id, key="n", content=value + 1)
                    uow.entries.save(namespace, new, expected_version=expected)
                uow.commit()
            return
        except ConcurrencyError:
            continue


@pytest.mark.parametrize("compact", [False, True], ids=["appending", "compacting"])
def test_processes_lose_no_update(tmp_path: Path, compact: bool) -> None:
    processes, per_process = 4, 25
    ctx = forked.context()
    barrier = ctx.Barrier(processes)
    workers = [
        ctx.Process(target=_process_worker, args=(str(tmp_path), w, per_process, barrier, compact))
        for w in range(processes)
    ]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=240)
    assert [p.exitcode for p in workers] == [0] * processes
    store = FileStore(tmp_path)
    keys = {e.key for e in store.load("shared")}
    assert keys == {f"w{w}-{i}" for w in range(processes) for i in range(per_process)}
    for namespace in COUNTERS:
        counter = store.load(namespace)
        assert [e.content for e in counter] == [processes * per_process]
        assert counter[0].version == processes * per_process
    assert list((tmp_path / ".journal").iterdir()) == []


def test_threads_lose_no_update(tmp_path: Path) -> None:
    threads, per_thread = 8, 25
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run(worker: int) -> None:
        # Half the threads share one instance, the other half use their own.
        store = shared if worker % 2 else FileStore(tmp_path)
        try:
            barrier.wait()
            for i in range(per_thread):
                store.save("shared", MemoryEntry(key=f"t{worker}-{i}", content=i))
                _increment(store)
        except BaseException as exc:
            errors.append(exc)

    shared = FileStore(tmp_path)
    pool = [threading.Thread(target=run, args=(w,)) for w in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert errors == []
    keys = {e.key for e in shared.load("shared")}
    assert keys == {f"t{w}-{i}" for w in range(threads) for i in range(per_thread)}
    for namespace in COUNTERS:
        assert [e.content for e in shared.load(namespace)] == [threads * per_thread]
