"""``python -m bench --profile``: where W1 (add_turn) and W2 (history) spend their time.

Runs the library side only, on SQLite, under pyinstrument (a dev-only tool:
``pip install pyinstrument``), and writes text and HTML reports next to the JSON
results.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import BUDGET_TURNS, TextPool, budget_for_turns
from bench.ours import Ours
from bench.report import RESULTS_DIR


def main(*, quick: bool, seed: int) -> int:
    """Profile W1 and W2 on SQLite; return an exit code."""
    try:
        from pyinstrument import Profiler  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        print("pyinstrument is not installed: .venv/bin/pip install pyinstrument")
        return 2
    from firefly_orm.sql import SQLiteStore

    conversations, turns, reads = (5, 20, 100) if quick else (20, 50, 400)
    pool = TextPool(seed)
    rng = random.Random(seed)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
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
            for name, phase in phases.items():
                profiler = Profiler(interval=0.0005)
                profiler.start()
                phase()
                profiler.stop()
                text = profiler.output_text(unicode=False, color=False, show_all=False)
                base = RESULTS_DIR / f"profile-{stamp}-{name}"
                base.with_suffix(".txt").write_text(text)
                base.with_suffix(".html").write_text(profiler.output_html())
                print(f"===== {name} =====")
                print(text)
                print(f"(saved {base}.txt / .html)")
        finally:
            ours.close()
    return 0
