"""The bench's W9 (the knowledge graph's traversals, ``bench/graph.py``) at a tiny scale, once.

One level is loaded through the bench's bulk loader on SQLite, its W9 rows
come out, and every timed call's answer was compared with its cluster's (the
workload raises on the first wrong neighbour, fact or path), so what is checked
here is that the generated graph, the loader and the checks agree with the
library.  The bench is a tool beside the package, imported by name from the
repository root.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[2])


def _graph() -> Any:
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return importlib.import_module("bench.graph")


def test_w9_rows_on_sqlite(tmp_path: Path) -> None:
    from firefly_orm.sql import SQLiteStore

    graph = _graph()

    def level(edges: int) -> Any:
        return graph.Level(edges, SQLiteStore(tmp_path / f"w9-{edges}.sqlite3"))

    sizes = graph.W9Sizes((1_200,), 2)  # one level: no growth row
    rows = {row.workload: row for row in graph.w9_graph(level, sizes, 7, "sqlite", print)}
    assert sorted(rows) == sorted(f"W9 {op} @1200 edges" for op in graph.OPS)
    for row in rows.values():
        assert row.detail["calls"] == 2 and 0 < row.ours <= row.baseline  # p50 <= p95
        plans = row.detail["plans"]
        assert plans and not any("ix_knowledge_facts_user" in plan for plan in plans)
