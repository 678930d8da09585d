"""FileStore under concurrent writers: spawned processes and threads lose no update.

The fast, single-writer FileStore tests live in ``tests/unit/test_file_store.py``.
"""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any

from firefly_orm.entry import MemoryEntry, derived_entry_id
from firefly_orm.errors import ConcurrencyError
from firefly_orm.file_store import FileStore


def _process_worker(base: str, worker: int, count: int, barrier: Any) -> None:
    store = FileStore(base)
    barrier.wait()
    for i in range(count):
        store.save("shared", MemoryEntry(key=f"w{worker}-{i}", content=i))
        _increment(store, "counter")


def _increment(store: FileStore, namespace: str) -> None:
    """Read-modify-write a counter entry through a unit of work, retrying on conflict."""
    counter_id = derived_entry_id(namespace, "n")
    while True:
        try:
            with store.unit_of_work() as uow:
                current = uow.entries.get(namespace, counter_id)
                value = 0 if current is None else current.content
                expected = 0 if current is None else current.version
                new = MemoryEntry(entry_id=counter_id, key="n", content=value + 1)
                uow.entries.save(namespace, new, expected_version=expected)
                uow.commit()
            return
        except ConcurrencyError:
            continue


def test_processes_lose_no_update(tmp_path: Path) -> None:
    processes, per_process = 4, 25
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    workers = [
        ctx.Process(target=_process_worker, args=(str(tmp_path), w, per_process, barrier))
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
    counter = store.load("counter")
    assert [e.content for e in counter] == [processes * per_process]
    assert counter[0].version == processes * per_process


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
                _increment(store, "counter")
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
    assert [e.content for e in shared.load("counter")] == [threads * per_thread]
