"""W4, W5 and W5b (ours against the same-work baseline); each returns result rows.

W1-W3 (every implementation, sync and async) are in :mod:`bench.cells`.

Every workload runs the library ("ours") and the raw-driver baseline on the same
operation sequence, interleaved operation by operation (alternating which side
goes first), so background noise such as disk flushes hits both sides alike.
Only the call itself is timed; data generation and sanity checks are not.

A workload's operation sequence is written once, as a generator of
:data:`Call` s; :func:`_measure` runs it on sync adapters and :func:`_ameasure`
awaits it on async ones, so the sync and async rows do identical work.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.common import (
    BUDGET_TURNS,
    Row,
    Sizes,
    TextPool,
    budget_for_turns,
    median,
    percentile,
)

Turn = tuple[str, str, list[dict[str, str]]]
#: One measured operation: (ours' method, the baseline's method, the arguments).
Call = tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...]]


class CheckFailed(AssertionError):
    """Ours and the baseline disagree: the numbers would not be comparable."""


def _pair_call(
    i: int, ours: Callable[..., Any], base: Callable[..., Any], *args: Any
) -> tuple[float, float, Any, Any]:
    """Time ``ours(*args)`` and ``base(*args)``, alternating the order with ``i``.

    Returns (ours seconds, baseline seconds, ours result, baseline result).
    """
    first, second = (ours, base) if i % 2 == 0 else (base, ours)
    t0 = time.perf_counter()
    r1 = first(*args)
    t1 = time.perf_counter()
    r2 = second(*args)
    t2 = time.perf_counter()
    return _ours_first(i, t1 - t0, t2 - t1, r1, r2)


async def _apair_call(
    i: int, ours: Callable[..., Awaitable[Any]], base: Callable[..., Awaitable[Any]], *args: Any
) -> tuple[float, float, Any, Any]:
    """:func:`_pair_call` for coroutine functions (what is timed is each await)."""
    first, second = (ours, base) if i % 2 == 0 else (base, ours)
    t0 = time.perf_counter()
    r1 = await first(*args)
    t1 = time.perf_counter()
    r2 = await second(*args)
    t2 = time.perf_counter()
    return _ours_first(i, t1 - t0, t2 - t1, r1, r2)


def _ours_first(i: int, s1: float, s2: float, r1: Any, r2: Any) -> tuple[float, float, Any, Any]:
    """Seconds and results of the first and second call, reordered ours-first."""
    return (s1, s2, r1, r2) if i % 2 == 0 else (s2, s1, r2, r1)


@dataclass
class Samples:
    """Seconds and results of a measured call sequence, ours and the baseline's."""

    ours: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    results: list[tuple[Any, Any]] = field(default_factory=list)

    def add(self, measured: tuple[float, float, Any, Any]) -> None:
        """Record one :func:`_pair_call` result."""
        o, b, mine, theirs = measured
        self.ours.append(o)
        self.base.append(b)
        self.results.append((mine, theirs))


def _measure(calls: Iterable[Call]) -> Samples:
    """Run and time each call on both sides (sync adapters)."""
    samples = Samples()
    for i, (ours, base, args) in enumerate(calls):
        samples.add(_pair_call(i, ours, base, *args))
    return samples


async def _ameasure(calls: Iterable[Call]) -> Samples:
    """Run and time each call on both sides (async adapters)."""
    samples = Samples()
    for i, (ours, base, args) in enumerate(calls):
        samples.add(await _apair_call(i, ours, base, *args))
    return samples


def _new_ids(n: int) -> list[str]:
    return [uuid.uuid4().hex for _ in range(n)]


def _latency_row(
    workload: str,
    backend: str,
    ours_s: list[float],
    base_s: list[float],
    target: float | None,
    **extra: Any,
) -> Row:
    o50, b50 = median(ours_s), median(base_s)
    detail = {
        "samples": len(ours_s),
        "ours_p50_ms": 1000 * o50,
        "ours_p95_ms": 1000 * percentile(ours_s, 95),
        "baseline_p50_ms": 1000 * b50,
        "baseline_p95_ms": 1000 * percentile(base_s, 95),
        "p95_ratio": percentile(ours_s, 95) / percentile(base_s, 95),
    }
    detail.update(extra)
    return Row(
        workload, backend, "p50 ms", 1000 * o50, 1000 * b50, o50 / b50, target, detail=detail
    )


def _check_same(what: str, ours: list[Any], base: list[Any], expected: int) -> None:
    if len(ours) != expected or len(base) != expected:
        raise CheckFailed(
            f"{what}: expected {expected} messages, ours {len(ours)}, raw {len(base)}"
        )
    if ours != base:
        raise CheckFailed(f"{what}: ours and raw returned different messages")


# =========================================================================== call sequences


def _warm_up_calls(ours: Any, base: Any, pool: TextPool) -> Iterator[Call]:
    cid = "warmup-" + uuid.uuid4().hex
    for _ in range(3):
        yield ours.add_turn, base.add_turn, (cid, *pool.turn())
    yield ours.history, base.history, (cid, None)
    yield ours.wm_set, base.wm_set, ("warmup", "k", 1)
    yield ours.wm_get, base.wm_get, ("warmup", "k")


# =========================================================================== sync


def warm_up(ours: Any, base: Any, pool: TextPool) -> None:
    """Open connections, run migrations, fill statement caches (untimed)."""
    _measure(_warm_up_calls(ours, base, pool))


def w4_scale(
    make_pair: Callable[[str], tuple[Any, Any]],
    sizes: Sizes,
    pool: TextPool,
    backend: str,
    seed: int,
    log: Callable[[str], None],
) -> list[Row]:
    """W4: the W2 budget read with 1k, 10k (and 100k) turns in the database.

    One database per level, all filled first; then the reads go round-robin over
    the levels, so load drift during the run hits every level alike.
    """
    rng = random.Random(seed)
    template: list[Turn] = [pool.turn() for _ in range(sizes.scale_conv_turns)]
    budget = budget_for_turns(pool.turn_tokens, BUDGET_TURNS)
    pairs: dict[int, tuple[Any, Any]] = {}
    cids: dict[int, list[str]] = {}
    try:
        for level in sizes.scale_levels:
            started = time.perf_counter()
            ours, base = pairs[level] = make_pair(f"w4_{level // 1000}k")
            warm_up(ours, base, pool)
            cids[level] = []
            count = level // sizes.scale_conv_turns
            for start in range(0, count, 100):
                chunk = [(uuid.uuid4().hex, template) for _ in range(min(100, count - start))]
                ours.bulk_fill(chunk)
                base.bulk_fill(chunk)
                cids[level].extend(cid for cid, _ in chunk)
            last = cids[level][-1]
            _check_same("W4", ours.history(last, budget), base.history(last, budget), 20)
            log(f"  W4 {backend}: {level} turns loaded ({time.perf_counter() - started:.1f} s)")
        samples: dict[int, tuple[list[float], list[float]]] = {
            level: ([], []) for level in sizes.scale_levels
        }
        for i in range(sizes.scale_reads):
            for level, (ours, base) in pairs.items():
                cid = rng.choice(cids[level])
                o, b, _, _ = _pair_call(i, ours.history, base.history, cid, budget)
                samples[level][0].append(o)
                samples[level][1].append(b)
        rows: list[Row] = []
        for level, (ours_s, base_s) in samples.items():
            row = _latency_row(
                f"W4 budget read @{level // 1000}k turns", backend, ours_s, base_s, None
            )
            row.kind = "info"
            rows.append(row)
        low, high = sizes.scale_levels[0], sizes.scale_levels[-1]
        p50 = {level: (median(o), median(b)) for level, (o, b) in samples.items()}
        ours_growth = p50[high][0] / p50[low][0]
        base_growth = p50[high][1] / p50[low][1]
        rows.append(
            Row(
                f"W4 scale {low // 1000}k->{high // 1000}k",
                backend,
                "p50 growth",
                ours_growth,
                base_growth,
                ours_growth,
                1.5,
                kind="growth",
                detail={"p50_ms": {str(k): [1000 * v for v in p] for k, p in p50.items()}},
            )
        )
        return rows
    finally:
        for ours, base in pairs.values():
            ours.close()
            base.close()


def w5_long(
    make_pair: Callable[[str], tuple[Any, Any]],
    sizes: Sizes,
    pool: TextPool,
    backend: str,
    *,
    evict: bool = True,
) -> Row:
    """W5: add_turn cost at turn 10 vs the late turn, with eviction active.

    With ``evict=False`` (W5b) nothing is evicted, so the conversation really
    holds ``long_turn`` turns when the late window is measured.
    """
    ours, base = make_pair("w5" if evict else "w5b")
    try:
        warm_up(ours, base, pool)
        # Untimed: let the database and WAL files reach their steady size first, so
        # turn 10 is not charged with the file growth of a brand-new database.
        settle = uuid.uuid4().hex
        for _ in range(sizes.settle_turns):
            user, assistant, messages = pool.turn()
            ours.add_turn(settle, user, assistant, messages)
            base.add_turn(settle, user, assistant, messages)
        cid = uuid.uuid4().hex
        for _ in range(sizes.long_turn - 10):  # untimed: grow the long conversation
            user, assistant, messages = pool.turn()
            ours.add_turn(cid, user, assistant, messages)
            base.add_turn(cid, user, assistant, messages)
        fresh = _new_ids(2)
        for short in fresh:  # untimed: turns 0..4 of two fresh conversations
            for _ in range(5):
                user, assistant, messages = pool.turn()
                ours.add_turn(short, user, assistant, messages)
                base.add_turn(short, user, assistant, messages)
        # Timed, interleaved step by step so load drift hits both windows alike:
        # turns long_turn-10 .. long_turn+11 of the long conversation (late window)
        # and turns 5..15 of each fresh conversation (early window, around turn 10).
        early_ours: list[float] = []
        early_base: list[float] = []
        late_ours: list[float] = []
        late_base: list[float] = []
        for step in range(22):
            user, assistant, messages = pool.turn()
            o, b, _, _ = _pair_call(
                step, ours.add_turn, base.add_turn, cid, user, assistant, messages
            )
            late_ours.append(o)
            late_base.append(b)
            short = fresh[step // 11]
            user, assistant, messages = pool.turn()
            o, b, _, _ = _pair_call(
                step + 1, ours.add_turn, base.add_turn, short, user, assistant, messages
            )
            early_ours.append(o)
            early_base.append(b)
        kept = len(ours.history(cid, None)) // 2
        return growth_row(
            backend, sizes, evict, (early_ours, late_ours), (early_base, late_base), kept=kept
        )
    finally:
        ours.close()
        base.close()


def growth_row(
    backend: str,
    sizes: Sizes,
    evict: bool,
    ours: tuple[list[float], list[float]],
    base: tuple[list[float], list[float]],
    **detail: Any,
) -> Row:
    """The W5 / W5b row: ``add_turn`` latency at the long turn over turn 10, both sides.

    ``ours`` and ``base`` are (early, late) timings; ``detail`` adds to the row's detail.
    """
    o_early, o_late = median(ours[0]), median(ours[1])
    b_early, b_late = median(base[0]), median(base[1])
    name = "W5 long conv" if evict else "W5b no eviction"
    return Row(
        f"{name} t10->t{sizes.long_turn}",
        backend,
        "add_turn growth",
        o_late / o_early,
        b_late / b_early,
        o_late / o_early,
        1.5,
        kind="growth",
        detail={
            "ours_turn10_ms": 1000 * o_early,
            f"ours_turn{sizes.long_turn}_ms": 1000 * o_late,
            "baseline_turn10_ms": 1000 * b_early,
            f"baseline_turn{sizes.long_turn}_ms": 1000 * b_late,
            "cost_ratio_late": o_late / b_late,
            "eviction": evict,
            "window": "turns 5-15 of 2 fresh conversations vs late-10..late+11, interleaved",
            **detail,
        },
    )
