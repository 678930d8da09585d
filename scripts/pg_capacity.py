"""The PostgreSQL CPU one turn and one history read cost (numbers for the scale-out plan).

``python scripts/pg_capacity.py [--url URL] [--workers N] [--seconds S]`` starts N
worker processes, each with its own store on a throwaway schema, that run
``ConversationMemory.add_turn`` (one unit of work per turn, messages of about 300
characters, a 4,000-token budget so eviction runs) for S seconds, then
``get_message_history`` (budget read of 20 messages) for S seconds, each on
conversations of its own.  It reports, per phase, the operations per second of
all workers together and the CPU seconds the PostgreSQL server processes serving
the workers spent (read from ``/proc/<pid>/stat`` of exactly those backends,
found by their ``application_name``), so a shared server's other clients do not
count.  ``1 / (CPU seconds per operation)`` is what one server core sustains for
that operation alone, before WAL fsync limits, checkpoints and autovacuum (the
background processes are not counted).

The server must run on this machine (``/proc``), readable by this user.  The
schema is dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TEXT = ("the quick brown fox jumps over the lazy dog " * 7)[:300]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _worker(
    url: str,
    schema: str,
    app: str,
    seconds: float,
    phase: str,
    queue: Any,
    go: Any,
    release: Any,
) -> None:
    from firefly_orm.conversation import ConversationMemory
    from firefly_orm.sql import PostgreSQLStore

    store = PostgreSQLStore(
        url,
        schema_name=schema,
        pool_size=1,
        pool_min_size=1,
        engine_kwargs={"connect_args": {"application_name": app}},
    )
    memory = ConversationMemory(store=store, max_tokens=4_000)
    reader = ConversationMemory(store=store, max_tokens=4_000, max_messages=20)
    me = uuid.uuid4().hex[:8]
    cids = [f"{me}-{i}" for i in range(8)]
    try:
        store.initialize()  # opens the pooled connection (pool_min_size=1)
        if phase == "reads":
            for cid in cids:  # something to read: 40 turns each
                for n in range(40):
                    memory.add_turn(cid, f"{n} {TEXT}", TEXT)
        queue.put(("ready", os.getpid()))
        go.wait()
        start = time.monotonic()
        done = 0
        while time.monotonic() - start < seconds:
            cid = cids[done % len(cids)]
            if phase == "turns":
                memory.add_turn(cid, f"{done} {TEXT}", TEXT)
            else:
                reader.get_message_history(cid)
            done += 1
        queue.put(("done", done))
        release.wait(600)  # the parent reads the backends' CPU time first
    finally:
        store.close()


def _backends(url: str, app: str) -> list[int]:
    import sqlalchemy as sa

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT pid FROM pg_stat_activity WHERE application_name = :app"),
                {"app": app},
            )
            return [int(row[0]) for row in rows]
    finally:
        engine.dispose()


def run_phase(url: str, schema: str, workers: int, seconds: float, phase: str) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    go, release = ctx.Event(), ctx.Event()
    app = f"ffcap-{uuid.uuid4().hex[:8]}"
    procs = [
        ctx.Process(
            target=_worker,
            args=(url, schema, app, seconds, phase, queue, go, release),
        )
        for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            kind, _value = queue.get(timeout=600)
            assert kind == "ready"
        pids = _backends(url, app)
        before = {pid: _cpu_seconds(pid) for pid in pids}
        clients_before = sum(_cpu_seconds(p.pid or 0) for p in procs)
        go.set()
        started = time.monotonic()
        total = 0
        for _ in procs:
            kind, value = queue.get(timeout=seconds + 600)
            assert kind == "done"
            total += int(value)
        elapsed = time.monotonic() - started
        after = {pid: _cpu_seconds(pid) for pid in pids}
        server_cpu = sum(after[pid] - cpu for pid, cpu in before.items())
        client_cpu = sum(_cpu_seconds(p.pid or 0) for p in procs) - clients_before
        if len(pids) != workers or not all(after.values()):
            raise RuntimeError(f"expected {workers} live backends, saw {after}")
    finally:
        go.set()
        release.set()
        for proc in procs:
            proc.join(timeout=60)
    return {
        "phase": phase,
        "workers": workers,
        "backends": len(pids),
        "operations": total,
        "seconds": round(elapsed, 2),
        "per_second": round(total / elapsed, 1),
        "server_cpu_s": round(server_cpu, 2),
        "server_cpu_ms_per_op": round(1000 * server_cpu / total, 3) if total else None,
        "ops_per_server_core_s": round(total / server_cpu, 0) if server_cpu else None,
        "client_cpu_s": round(client_cpu, 2),
        "loadavg_before": os.getloadavg(),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--url", default=os.environ.get("FIREFLY_ORM_TEST_POSTGRES_URL", DEFAULT_URL)
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)

    import sqlalchemy as sa

    from firefly_orm.sql import PostgreSQLStore

    schema = f"ffcap_{uuid.uuid4().hex[:8]}"
    store = PostgreSQLStore(args.url, schema_name=schema, pool_min_size=0)
    store.initialize()
    store.close()
    results = []
    try:
        for phase in ("turns", "reads"):
            results.append(run_phase(args.url, schema, args.workers, args.seconds, phase))
            print(json.dumps(results[-1]), flush=True)
    finally:
        engine = sa.create_engine(args.url, poolclass=sa.pool.NullPool)
        with engine.begin() as conn:
            conn.execute(sa.schema.DropSchema(schema, cascade=True, if_exists=True))
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
