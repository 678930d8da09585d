"""Micro-benchmark: how fast entries are built and serialised, per construction path.

``python -m bench.entry_construction [--count N] [--repeat R] [--wall]`` builds
``N`` entries (default 100,000) along each path and prints the best of ``R`` runs
(default 5) in microseconds per entry.  Times are the process's CPU time
(``--wall``: wall-clock time) with the garbage collector paused, so that other
load on the machine disturbs them little:

* ``sql row_to_entry``: the SQL stores' read path (typed column values).
* ``from_dict (python)``: the MongoDB store's read path (datetimes already parsed).
* ``from_dict (json) + validate``: the file store's read path (ISO strings, then
  :func:`~firefly_orm.entry.validate_entry`).
* ``copy_entry``: what the in-memory and file stores return to the caller.
* ``MemoryEntry(**fields)``: the public constructor (validates and coerces).
* ``model_dump_json`` / ``model_validate_json``: one entry at a time.
* ``TypeAdapter(list).dump_json``: the whole list at once (a web response).

Timing lives here, never in the test suite.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import TypeAdapter

from firefly_orm.entry import MemoryEntry, MemoryScope, new_entry_id, validate_entry
from firefly_orm.sql._statements import row_to_entry


def _fields(i: int) -> dict[str, Any]:
    created = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=i)
    return {
        "entry_id": new_entry_id(),
        "namespace": "bench",
        "scope": MemoryScope.LONG_TERM,
        "key": f"key-{i}",
        "content": {"text": f"entry number {i}", "tags": ["a", "b"], "n": i},
        "metadata": {"source": "bench", "i": i},
        "created_at": created,
        "expires_at": created + timedelta(days=30),
        "importance": 0.25,
        "version": 1,
        "user_id": "user-1",
        "search_text": f"entry number {i}",
        "search_language": None,
    }


def _row(fields: dict[str, Any]) -> tuple[Any, ...]:
    return (
        fields["entry_id"],
        fields["namespace"],
        fields["scope"],
        fields["key"],
        fields["content"],
        fields["metadata"],
        fields["created_at"],
        fields["expires_at"],
        fields["importance"],
        fields["version"],
        fields["user_id"],
        fields["search_text"],
        fields["search_language"],
    )


def _best(run: Callable[[], object], repeat: int, clock: Callable[[], float]) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            start = clock()
            run()
            best = min(best, clock() - start)
        finally:
            gc.enable()
    return best


def main(argv: Sequence[str] | None = None) -> int:
    """Run every path and print microseconds per entry."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--wall", action="store_true", help="wall-clock instead of CPU time")
    args = parser.parse_args(argv)
    count: int = args.count
    repeat: int = args.repeat
    clock = time.perf_counter if args.wall else time.process_time

    fields = [_fields(i) for i in range(count)]
    rows = [_row(f) for f in fields]
    json_dicts = [MemoryEntry.from_dict(f).to_json_dict() for f in fields]
    entries = [MemoryEntry.from_dict(f) for f in fields]
    dumped = [e.model_dump_json() for e in entries]
    adapter = TypeAdapter(list[MemoryEntry])

    def file_read() -> None:
        for d in json_dicts:
            validate_entry(MemoryEntry.from_dict(d))

    paths: list[tuple[str, Callable[[], object]]] = [
        ("sql row_to_entry", lambda: [row_to_entry(r) for r in rows]),
        ("from_dict (python)", lambda: [MemoryEntry.from_dict(f) for f in fields]),
        ("from_dict (json) + validate", file_read),
        ("copy_entry", lambda: [e.copy_entry() for e in entries]),
        ("MemoryEntry(**fields)", lambda: [MemoryEntry(**f) for f in fields]),
        ("model_dump_json", lambda: [e.model_dump_json() for e in entries]),
        ("model_validate_json", lambda: [MemoryEntry.model_validate_json(j) for j in dumped]),
        ("TypeAdapter(list).dump_json", lambda: adapter.dump_json(entries)),
    ]
    print(f"{count} entries, best of {repeat}, {'wall' if args.wall else 'CPU'} time")
    print(f"{'path':32} {'total s':>9} {'us/entry':>9}")
    for name, run in paths:
        seconds = _best(run, repeat, clock)
        print(f"{name:32} {seconds:9.3f} {seconds / count * 1e6:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
