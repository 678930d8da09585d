"""The bench's W8 (semantic recall, ``bench/vectors.py``) at a tiny scale, once.

Both sides are loaded (the library through ``import_items`` with vectors), every
row W8 reports is produced, and what can be checked without timing is: on
SQLite both searches are exact scans, so the library's recall@10 against numpy's
exact search is 1.0 (a wrong vector, a lost hit or a wrong distance would lower
it); on PostgreSQL (pgvector) the rows come out, the plans are recorded and the
bench's schemas are dropped afterwards.  The bench is a tool beside the
package, imported by name from the repository root.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

ROOT = str(Path(__file__).resolve().parents[2])


def _vectors() -> Any:
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return importlib.import_module("bench.vectors")


def _tiny() -> Any:
    return _vectors().W8Sizes(levels=(60, 120), queries=4, reads=3)


def _by_workload(rows: list[Any]) -> dict[str, Any]:
    return {row.workload: row for row in rows}


def _check_rows(rows: dict[str, Any]) -> None:
    assert set(rows) == {
        "W8 recall@10 @60",
        "W8 recall@10 @120",
        "W8 semantic @60",
        "W8 semantic @120",
        "W8 semantic scale 60->120",
        "W8 hybrid / text @120",
    }
    for size in (60, 120):
        semantic = rows[f"W8 semantic @{size}"]
        assert semantic.ours > 0 and semantic.baseline > 0 and semantic.target == 1.5
        assert semantic.detail["samples"] == 3
    assert rows["W8 hybrid / text @120"].ours > 0


def test_sqlite_w8_is_exact(tmp_path: Path) -> None:
    vectors = _vectors()

    def pair(label: str, cache: Any) -> tuple[Any, Any]:
        from firefly_orm.sql import SQLiteStore

        store = SQLiteStore(tmp_path / f"ours-{label}.sqlite3", vectors=True)
        ours = vectors.OursVectors(store, cache)
        return ours, vectors.RawSQLiteVectors(str(tmp_path / f"raw-{label}.sqlite3"), cache)

    rows = _by_workload(vectors.w8_vectors(pair, _tiny(), 7, "sqlite", lambda _: None))
    _check_rows(rows)
    for size in (60, 120):
        quality = rows[f"W8 recall@10 @{size}"]
        assert quality.ours == 1.0 and quality.baseline == 1.0 and quality.met is True


@pytest.mark.pgvector
def test_postgres_w8_runs_and_drops_its_schemas(pgvector_url: str) -> None:
    vectors = _vectors()
    rows = _by_workload(vectors.postgres_w8(pgvector_url, _tiny(), 7, lambda _: None))
    _check_rows(rows)
    for size in (60, 120):
        quality = rows[f"W8 recall@10 @{size}"]
        assert 0.0 < quality.ours <= 1.0 and 0.0 < quality.baseline <= 1.0
        assert "memory_vectors" in quality.detail["ours_plan"]
        assert "items" in quality.detail["baseline_plan"]
    engine = sa.create_engine(pgvector_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            left = conn.execute(
                sa.text("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'ffbench_%'")
            ).scalar_one()
    finally:
        engine.dispose()
    assert left == 0


def test_recall_at_k_counts_ties_with_the_kth_nearest() -> None:
    vectors = _vectors()
    k = vectors.K
    # 12 items: similarities to the query 1.0, 0.9, ..., the 10th and 11th tied.
    similarities = np.asarray([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.0])
    matrix = np.diag(np.ones(12, dtype=np.float32)) * similarities[:, None]
    query = np.ones(12, dtype=np.float32)
    index = {f"e{n}": n for n in range(12)}
    exact = [f"e{n}" for n in range(k)]
    assert vectors.recall_at_k(exact, query, index, matrix) == 1.0
    tied = [*exact[:-1], "e10"]  # the 11th, tied with the 10th: as good
    assert vectors.recall_at_k(tied, query, index, matrix) == 1.0
    worse = [*exact[:-1], "e11"]  # the 12th instead of the 10th: one miss
    assert vectors.recall_at_k(worse, query, index, matrix) == pytest.approx(0.9)
