"""The results table and the JSON file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.common import Row

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _fmt(value: float, unit: str) -> str:
    if "growth" in unit:
        return f"{value:.2f}x"
    if unit.endswith("/s"):
        return f"{value:,.0f} {unit}"
    return f"{value:.3f} ms"


def _target(row: Row) -> str:
    if row.target is None:
        return "-"
    return f"growth <= {row.target:g}x" if row.kind == "growth" else f"<= {row.target:g}x"


def table(rows: list[Row]) -> str:
    """A fixed-width table: workload, backend, ours, baseline, ratio, target, met."""
    header = ("workload", "backend", "ours", "baseline", "ratio", "target", "met")
    lines = [header]
    for row in rows:
        met = "-" if row.met is None else ("yes" if row.met else "NO")
        lines.append(
            (
                row.workload,
                row.backend,
                _fmt(row.ours, row.unit),
                _fmt(row.baseline, row.unit),
                f"{row.ratio:.2f}x",
                _target(row),
                met,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for n, line in enumerate(lines):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def write_json(rows: list[Row], meta: dict[str, Any], errors: list[str]) -> Path:
    """Write ``bench/results/<timestamp>.json`` and return its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS_DIR / f"{stamp}{'-quick' if meta.get('quick') else ''}.json"
    payload = {"meta": meta, "errors": errors, "rows": [row.to_json() for row in rows]}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path
