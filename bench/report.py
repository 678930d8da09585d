"""The results table and the JSON file."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.cells import (
    ANCHOR,
    ASYNC_TARGET,
    MINIMAL,
    OURS,
    OURS_UNINDEXED,
    PEER,
    SAME_WORK,
    TARGETS,
    W1,
    CellResult,
)
from bench.common import Row, median
from bench.peers import OPENAI_SQLITE

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _fmt(value: float, unit: str) -> str:
    if unit.startswith("recall"):
        return f"{value:.3f}"
    if "growth" in unit:
        return f"{value:.2f}x"
    if unit.endswith("/s"):
        return f"{value:,.0f} {unit}"
    return f"{value:.3f} ms"


def _target(row: Row) -> str:
    if row.target is None:
        return "-"
    if row.kind == "quality":
        return f">= {row.target:g}"
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
                _fmt(row.ratio, row.unit) if row.kind == "quality" else f"{row.ratio:.2f}x",
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


def write_json(
    rows: list[Row], meta: dict[str, Any], errors: list[str], cells: Sequence[CellResult] = ()
) -> Path:
    """Write ``bench/results/<timestamp>.json`` and return its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS_DIR / f"{stamp}{'-quick' if meta.get('quick') else ''}.json"
    payload = {
        "meta": meta,
        "errors": errors,
        "cells": [cell.to_json() for cell in cells],
        "rows": [row.to_json() for row in rows],
    }
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


# --------------------------------------------------------------------------- W1-W3 cells


def _range(values: list[float]) -> str:
    """``min-max`` of ratios (one value when they round alike)."""
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return f"{low}x" if low == high else f"{low}-{high}x"


def _ratios(costs: list[float], against: list[float] | None) -> list[float]:
    if not costs or not against or len(against) != len(costs):
        return []
    return [c / a for c, a in zip(costs, against, strict=True)]


def _costs_of(group: list[CellResult], role: str) -> list[float] | None:
    for result in group:
        if result.role == role and result.costs:
            return result.costs
    return None


def cell_groups(results: list[CellResult]) -> dict[tuple[str, str, str], list[CellResult]]:
    """Results by (backend, api, cell), in the order they were measured."""
    groups: dict[tuple[str, str, str], list[CellResult]] = {}
    for result in results:
        groups.setdefault((result.backend, result.api, result.cell), []).append(result)
    return groups


def cells_table(results: list[CellResult]) -> str:
    """W1-W3: per implementation, the cost per operation and the ratios' range over rounds.

    ``x minimal`` / ``x same-work``: its cost over the minimal / same-work driver
    code's; ``ours / it``: firefly_orm's cost over its (below 1: ours is faster).
    """
    header = (
        "cell",
        "backend",
        "api",
        "implementation",
        "per op",
        "x minimal",
        "x same-work",
        "ours / it",
        "target (ours x minimal)",
    )
    lines: list[tuple[str, ...]] = [header]
    for (backend, api, cell), group in cell_groups(results).items():
        minimal = _costs_of(group, MINIMAL)
        same = _costs_of(group, SAME_WORK)
        ours = _costs_of(group, OURS)
        for result in group:
            if not result.costs:
                status = result.status if len(result.status) <= 70 else result.status[:67] + "..."
                lines.append((cell, backend, api, result.label, status, "", "", "", ""))
                continue
            target = ""
            if result.role == OURS and minimal:
                ratios = _ratios(result.costs, minimal)
                met = median(ratios) <= TARGETS[cell]
                target = f"<= {TARGETS[cell]:g}x {'yes' if met else 'NO'}"
            vs_ours = _ratios(ours or [], result.costs)
            lines.append(
                (
                    cell,
                    backend,
                    api,
                    result.label,
                    f"{1000 * median(result.costs):.3f} ms",
                    _range(_ratios(result.costs, minimal)) if minimal else "-",
                    _range(_ratios(result.costs, same)) if same else "-",
                    _range(vs_ours) if vs_ours and result.role != OURS else "-",
                    target,
                )
            )
    return _render(lines)


def async_table(results: list[CellResult]) -> str:
    """firefly_orm async over firefly_orm sync, per backend and cell (median costs)."""
    groups = cell_groups(results)
    lines: list[tuple[str, ...]] = [("cell", "backend", "ours async / ours sync", "target")]
    for (backend, api, cell), group in groups.items():
        if api != "async":
            continue
        mine = _costs_of(group, OURS)
        sync = _costs_of(groups.get((backend, "sync", cell), []), OURS)
        if not mine or not sync:
            continue
        ratio = median(mine) / median(sync)
        met = "yes" if ratio <= ASYNC_TARGET else "NO"
        lines.append((cell, backend, f"{ratio:.2f}x", f"<= {ASYNC_TARGET:g}x {met}"))
    return _render(lines) if len(lines) > 1 else ""


#: Issue 35: firefly_orm's cost over the plain SQLAlchemy ORM code's, at most (every cell).
ANCHOR_TARGET = 1.0
#: Issue 35: over every peer's on PostgreSQL, at most.
PEER_TARGET = 1.0
#: Issue 35: SQLite W1 over OpenAI Agents' ``SQLiteSession`` (bare ``sqlite3``), at most.
OPENAI_TARGET = 1.25


def targets_table(results: list[CellResult]) -> str:
    """Issue 35's targets, per backend, API and cell: firefly_orm's cost over the plain
    SQLAlchemy ORM code's, over the slowest-to-beat peer's on PostgreSQL, and over
    OpenAI's ``SQLiteSession`` on SQLite W1; each ratio's range over the rounds, met when
    its median is within the target.  Where the bench ran firefly_orm with
    ``text_search=False`` too (W1), its rows follow ours, marked ``unindexed``."""
    lines: list[tuple[str, ...]] = [
        ("cell", "backend", "api", "ours", "ours / it", "against", "target")
    ]
    for (backend, api, cell), group in cell_groups(results).items():
        for role, which in ((OURS, "default"), (OURS_UNINDEXED, "unindexed")):
            mine = _costs_of(group, role) or []
            for it, limit in _targets_of(backend, cell, group, mine) if mine else ():
                ratios = _ratios(mine, it.costs)
                if ratios:
                    met = "yes" if median(ratios) <= limit else "NO"
                    lines.append(
                        (
                            cell,
                            backend,
                            api,
                            which,
                            _range(ratios),
                            it.label,
                            f"<= {limit:g}x {met}",
                        )
                    )
    return _render(lines) if len(lines) > 1 else ""


def _targets_of(
    backend: str, cell: str, group: list[CellResult], mine: list[float]
) -> list[tuple[CellResult, float]]:
    """What our costs ``mine`` in one cell's ``group`` are held against, with each limit."""
    targets = [(r, ANCHOR_TARGET) for r in group if r.role == ANCHOR and r.costs]
    peers = [r for r in group if r.role == PEER and r.costs]
    if backend == "postgres" and peers:
        hardest = max(peers, key=lambda r: median(_ratios(mine, r.costs) or [0.0]))
        targets.append((hardest, PEER_TARGET))
    if backend == "sqlite" and cell == W1:
        targets += [(r, OPENAI_TARGET) for r in peers if r.label == OPENAI_SQLITE]
    return targets


def _render(lines: list[tuple[str, ...]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for n, line in enumerate(lines):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
