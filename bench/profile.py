"""``python -m bench --profile``: where W1 (add_turn) and W2 (history) spend their time.

Runs the library side only, on SQLite, under pyinstrument (a dev-only tool:
``pip install pyinstrument``), and writes text and HTML reports next to the JSON
results.  ``--profile --only W7`` profiles the W7 artifact operations instead
(CAS write, CAS write with versions, read), on SQLite, or on PostgreSQL with
``--backend postgres``.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import BUDGET_TURNS, FULL, QUICK, TextPool, budget_for_turns, postgres_url
from bench.ours import Ours
from bench.report import RESULTS_DIR


def _run_phases(phases: dict[str, Callable[[], None]], profiler_class: Any) -> None:
    """Profile each phase; print and save its text and HTML reports."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name, phase in phases.items():
        profiler = profiler_class(interval=0.0005)
        profiler.start()
        started = time.perf_counter()
        phase()
        elapsed = time.perf_counter() - started
        profiler.stop()
        text = profiler.output_text(unicode=False, color=False, show_all=False)
        base = RESULTS_DIR / f"profile-{stamp}-{name}"
        base.with_suffix(".txt").write_text(text)
        base.with_suffix(".html").write_text(profiler.output_html())
        print(f"===== {name} ({elapsed:.2f} s under the profiler) =====")
        print(text)
        print(f"(saved {base}.txt / .html)")


def _w7(quick: bool, seed: int, backend: str, tmp: Path, profiler_class: Any) -> None:
    """The W7 plan, library side only, one phase per operation."""
    from bench.artifacts import OursArtifacts, Plan

    store: Any
    if backend == "postgres":
        from firefly_orm.sql import PostgreSQLStore

        schema = f"ffprofile_{time.strftime('%H%M%S')}"
        store = PostgreSQLStore(postgres_url()[0], schema_name=schema)
    else:
        from firefly_orm.sql import SQLiteStore

        store = SQLiteStore(tmp / "profile-w7.sqlite3")
    ours = OursArtifacts(store)
    try:
        ours.open()
        sizes = QUICK if quick else FULL
        plan = Plan(sizes, TextPool(seed), seed, sizes.artifact_steps)
        for _op, path, value, _ in plan.creates[::2]:
            ours.write(path, value)
            ours.write_versioned(path, value)

        def phase(op: str) -> Callable[[], None]:
            method = getattr(ours, op)
            todo = [(path, value) for name, path, value, _ in plan.ops if name == op]

            def run() -> None:
                for path, value in todo:
                    if op == "read":
                        method(path)
                    else:
                        method(path, value)

            return run

        _run_phases(
            {f"w7-{op}": phase(op) for op in ("write", "write_versioned", "read")}, profiler_class
        )
    finally:
        if backend == "postgres":
            with store.engine.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        ours.close()


def main(
    *,
    quick: bool,
    seed: int,
    only: frozenset[str] = frozenset(),
    backend: str = "sqlite",
    tmpdir: str | None = None,
) -> int:
    """Profile W1 and W2 (or W7 when ``only`` holds it) on SQLite; return an exit code."""
    try:
        from pyinstrument import Profiler  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        print("pyinstrument is not installed: .venv/bin/pip install pyinstrument")
        return 2
    from firefly_orm.sql import SQLiteStore

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    if "W7" in only:
        with tempfile.TemporaryDirectory(prefix="firefly-profile-", dir=tmpdir) as tmp:
            _w7(quick, seed, backend, Path(tmp), Profiler)
        return 0

    conversations, turns, reads = (5, 20, 100) if quick else (20, 50, 400)
    pool = TextPool(seed)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="firefly-profile-") as tmp:
        ours = Ours(SQLiteStore(Path(tmp) / "profile.sqlite3"))
        try:
            ours.add_turn("warmup", *pool.turn())
            cids = [f"conv-{n}" for n in range(conversations)]
            budget = budget_for_turns(pool.turn_tokens, BUDGET_TURNS)

            def w1() -> None:
                for _ in range(turns):
                    for cid in cids:
                        ours.add_turn(cid, *pool.turn())

            def w2(limit: int | None) -> None:
                for _ in range(reads):
                    ours.history(rng.choice(cids), limit)

            phases: dict[str, Callable[[], None]] = {
                "w1-add_turn": w1,
                "w2-history-whole": lambda: w2(None),
                "w2-history-budget": lambda: w2(budget),
            }
            _run_phases(phases, Profiler)
        finally:
            ours.close()
    return 0
