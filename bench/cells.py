"""The comparison cells: every implementation a user could pick, same operations, same data.

A *cell* is one operation a chat-memory layer is used for:

* ``W1 append``: add one turn (a user and an assistant message) to a conversation;
* ``W2 read all``: every message of a conversation;
* ``W2 last 20``: its newest 20 messages;
* ``W3 key ops``: working-memory keys: set every key, then random 60 % get /
  25 % upsert / 15 % delete.

Each backend and API (sync, async) runs one comparison: the minimal
hand-written driver code (:mod:`bench.minimal`), the same-work driver code
(:mod:`bench.raw`), the plain SQLAlchemy ORM code (:mod:`bench.plain_orm`),
firefly_orm, and every peer (:mod:`bench.peers`) that can do
the cell, all in this process on the same operation sequence.  Each operation
is run by every implementation in turn, the order rotating by one each time, so
disk flushes and other processes hit them alike; only the call is timed.

The comparison is repeated ``sizes.rounds`` times (fresh conversations each
round); a round gives each implementation one cost per cell (mean seconds per
operation for W1 and W3, the median for the reads), and the table shows the
ratios' range over the rounds.

Every read is checked against what was written (the messages appended so far,
the key's current value from a model dictionary); an implementation that
returns anything else is dropped from the comparison and reported as failed.
"""

from __future__ import annotations

import random
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.common import QUICK, Sizes, TextPool, median
from bench.workloads import CheckFailed

W1, W2_ALL, W2_LAST, W3 = "W1 append", "W2 read all", "W2 last 20", "W3 key ops"
#: The cells, in table order.
CELLS = (W1, W2_ALL, W2_LAST, W3)
#: Conversation cells (a peer doing W2 must do W1: it reads what it appended).
CONVERSATION = frozenset({W1, W2_ALL, W2_LAST})
KEYS = frozenset({W3})
#: Messages returned by the "last N" read.
LAST_N = 20
#: Issue 18's targets for firefly_orm's cost as a multiple of the minimal driver code.
TARGETS = {W1: 1.5, W2_ALL: 3.0, W2_LAST: 2.0, W3: 1.5}
#: Issue 18's target for firefly_orm async over firefly_orm sync.
ASYNC_TARGET = 1.3
#: The untimed first round: connections, tables, statement caches of every implementation.
WARM_UP = Sizes(
    **{
        **QUICK.__dict__,
        **{"conversations": 2, "turns": 3, "reads": 2, "scopes": 1, "keys": 2, "wm_ops": 6},
    }
)

MINIMAL, SAME_WORK, OURS, PEER = "minimal", "same-work", "ours", "peer"
#: The plain SQLAlchemy ORM code (:mod:`bench.plain_orm`): issue 35's anchor.
ANCHOR = "anchor"
#: firefly_orm writing turns with ``ConversationMemory(text_search=False)``: the same
#: work as the anchor (no full-text index), W1 only.
OURS_UNINDEXED = "ours-unindexed"
#: Its row's label.
UNINDEXED_LABEL = "firefly_orm text_search=False"
_UNCHECKED: Any = object()


@dataclass
class Entry:
    """One implementation in a comparison.

    ``impl`` has the methods of the cells it does (``append(cid, user,
    assistant, messages)``, ``read_all(cid)``, ``read_last(cid, n)``,
    ``kv_set(scope, key, value)``, ``kv_get(scope, key)``, ``kv_delete(scope,
    key)``; coroutines in an async comparison), optionally ``prepare(cids)``
    (untimed, before each round) and ``close()``.  ``impl`` is ``None`` when the
    implementation cannot run here (``status`` says why: "not installed", ...).
    """

    label: str
    role: str
    impl: Any
    cells: frozenset[str]
    status: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class CellResult:
    """One implementation's costs on one cell (one per round), or why there are none."""

    cell: str
    backend: str
    api: str
    label: str
    role: str
    costs: list[float] = field(default_factory=list)
    status: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "backend": self.backend,
            "api": self.api,
            "implementation": self.label,
            "role": self.role,
            "cost_ms_per_round": [1000 * c for c in self.costs],
            "status": self.status,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Op:
    """One operation every implementation doing ``cell`` runs (``expect``: the right result)."""

    cell: str
    method: str
    args: tuple[Any, ...]
    expect: Any = _UNCHECKED


def wm_plan(sizes: Sizes, seed: int) -> list[tuple[str, str, str, Any]]:
    """The W3 operation sequence: set every key, then random get / upsert / delete."""
    rng = random.Random(seed)
    scopes = [f"scope-{s}" for s in range(sizes.scopes)]
    keys = [f"fact-{k}" for k in range(sizes.keys)]
    plan: list[tuple[str, str, str, Any]] = [
        ("set", scope, key, {"value": f"{scope}/{key}", "n": 0}) for scope in scopes for key in keys
    ]
    for n in range(sizes.wm_ops):
        op = rng.choices(("get", "set", "delete"), weights=(60, 25, 15))[0]
        plan.append((op, rng.choice(scopes), rng.choice(keys), {"value": "updated", "n": n + 1}))
    return plan


def round_ops(
    sizes: Sizes, pool: TextPool, seed: int, cids: list[str], cells: frozenset[str]
) -> Iterator[Op]:
    """One round: W1 appends round-robin over ``cids``, W2 reads of them, then W3."""
    history: dict[str, list[Any]] = {cid: [] for cid in cids}
    if cells & CONVERSATION:
        for _ in range(sizes.turns):
            for cid in cids:
                user, assistant, messages = pool.turn()
                history[cid].extend(messages)
                yield Op(W1, "append", (cid, user, assistant, messages))
    rng = random.Random(seed)
    if W2_ALL in cells:
        for _ in range(sizes.reads):
            cid = rng.choice(cids)
            yield Op(W2_ALL, "read_all", (cid,), history[cid])
    if W2_LAST in cells:
        for _ in range(sizes.reads):
            cid = rng.choice(cids)
            yield Op(W2_LAST, "read_last", (cid, LAST_N), history[cid][-LAST_N:])
    if W3 in cells:
        model: dict[tuple[str, str], Any] = {}
        for op, scope, key, value in wm_plan(sizes, seed):
            if op == "set":
                model[(scope, key)] = value
                yield Op(W3, "kv_set", (scope, key, value))
            elif op == "get":
                yield Op(W3, "kv_get", (scope, key), model.get((scope, key)))
            else:
                model.pop((scope, key), None)
                yield Op(W3, "kv_delete", (scope, key))


class Comparison:
    """One backend and API: its implementations, their samples, and failures."""

    def __init__(
        self,
        backend: str,
        api: str,
        entries: list[Entry],
        sizes: Sizes,
        seed: int,
        log: Callable[[str], None] = print,
    ) -> None:
        self.backend = backend
        self.api = api
        self.entries = entries
        self.sizes = sizes
        self.seed = seed
        self.log = log
        self.errors: list[str] = []
        self.warming = False
        for e in entries:
            if e.status.startswith("FAILED"):
                self.errors.append(f"{backend} {api} {e.label}: {e.status}")
        self.cells = frozenset(c for e in entries if e.impl is not None for c in e.cells)
        # samples[label][cell][round] -> seconds of each operation
        self.samples: dict[str, dict[str, list[list[float]]]] = {
            e.label: {cell: [] for cell in e.cells} for e in entries
        }

    @property
    def running(self) -> list[Entry]:
        return [e for e in self.entries if e.impl is not None and not e.status]

    def fail(self, entry: Entry, what: str, exc: BaseException) -> None:
        """Drop ``entry`` from the comparison and record why."""
        entry.status = f"FAILED ({what}): {type(exc).__name__}: {exc}"[:300]
        self.errors.append(f"{self.backend} {self.api} {entry.label}: {entry.status}")
        self.log(f"  {entry.label}: {entry.status}")
        if not isinstance(exc, CheckFailed):
            traceback.print_exception(exc, limit=6)

    def begin_round(self, rnd: int, warm_up: bool = False) -> tuple[list[str], Iterator[Op]]:
        """A round's conversations and operations; a warm-up round's samples are dropped."""
        sizes = WARM_UP if warm_up else self.sizes
        for entry in self.running:
            for cell in entry.cells:
                rounds = self.samples[entry.label][cell]
                if rounds and self.warming:
                    rounds.clear()
                rounds.append([])
        self.warming = warm_up
        cids = [f"r{rnd}-{uuid.uuid4().hex}" for _ in range(sizes.conversations)]
        pool = TextPool(self.seed + rnd)
        return cids, round_ops(sizes, pool, self.seed + rnd, cids, self.cells)

    def rounds(self) -> Iterator[tuple[int, bool]]:
        """(round number, warm-up?): an untimed warm-up round, then ``sizes.rounds``."""
        yield -1, True
        for rnd in range(self.sizes.rounds):
            yield rnd, False

    def groups(self) -> dict[str, list[Entry]]:
        return {cell: [e for e in self.running if cell in e.cells] for cell in self.cells}

    def record(self, entry: Entry, op: Op, seconds: float, result: Any) -> None:
        self.samples[entry.label][op.cell][-1].append(seconds)
        if op.expect is not _UNCHECKED and result != op.expect:
            raise CheckFailed(
                f"{op.method}{op.args[:2]} returned {_short(result)}, expected {_short(op.expect)}"
            )

    def results(self) -> list[CellResult]:
        """One :class:`CellResult` per implementation and cell (in :data:`CELLS` order)."""
        out: list[CellResult] = []
        for cell in CELLS:
            for entry in self.entries:
                if cell not in entry.cells:
                    continue
                result = CellResult(
                    cell, self.backend, self.api, entry.label, entry.role, detail=entry.detail
                )
                rounds = [r for r in self.samples[entry.label].get(cell, []) if r]
                if entry.impl is None or entry.status:
                    result.status = entry.status or "not available"
                elif rounds:
                    reads = cell in (W2_ALL, W2_LAST)
                    result.costs = [median(r) if reads else sum(r) / len(r) for r in rounds]
                out.append(result)
        return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


def _rotated(group: list[Entry], i: int) -> list[Entry]:
    k = i % len(group) if group else 0
    return group[k:] + group[:k]


def run_sync(comparison: Comparison) -> list[CellResult]:
    """Run ``sizes.rounds`` rounds of every cell on sync implementations."""
    for rnd, warm_up in comparison.rounds():
        cids, ops = comparison.begin_round(rnd, warm_up)
        for entry in comparison.running:
            prepare = getattr(entry.impl, "prepare", None)
            if prepare is not None:
                try:
                    prepare(cids)
                except Exception as exc:
                    comparison.fail(entry, "prepare", exc)
        groups = comparison.groups()
        for i, op in enumerate(ops):
            group = groups[op.cell]
            for entry in _rotated(group, i):
                if entry.status:
                    continue
                fn = getattr(entry.impl, op.method)
                try:
                    start = time.perf_counter()
                    result = fn(*op.args)
                    seconds = time.perf_counter() - start
                    comparison.record(entry, op, seconds, result)
                except Exception as exc:
                    comparison.fail(entry, op.cell, exc)
        if not warm_up:
            comparison.log(f"  {comparison.backend} {comparison.api}: round {rnd + 1} done")
    return comparison.results()


async def run_async(comparison: Comparison) -> list[CellResult]:
    """:func:`run_sync` for async implementations (what is timed is each await)."""
    for rnd, warm_up in comparison.rounds():
        cids, ops = comparison.begin_round(rnd, warm_up)
        for entry in comparison.running:
            prepare = getattr(entry.impl, "prepare", None)
            if prepare is not None:
                try:
                    await prepare(cids)
                except Exception as exc:
                    comparison.fail(entry, "prepare", exc)
        groups = comparison.groups()
        for i, op in enumerate(ops):
            group = groups[op.cell]
            for entry in _rotated(group, i):
                if entry.status:
                    continue
                fn = getattr(entry.impl, op.method)
                try:
                    start = time.perf_counter()
                    result = await fn(*op.args)
                    seconds = time.perf_counter() - start
                    comparison.record(entry, op, seconds, result)
                except Exception as exc:
                    comparison.fail(entry, op.cell, exc)
        if not warm_up:
            comparison.log(f"  {comparison.backend} {comparison.api}: round {rnd + 1} done")
    return comparison.results()


# --------------------------------------------------------------------------- adapters


class SameWork:
    """A :mod:`bench.raw` baseline (or ours) under the cell method names.

    ``read_last`` is the same-work budget read: the newest turns within a token
    budget that keeps ``LAST_N`` messages of the bench's turns.
    """

    def __init__(self, impl: Any, last_budget: int) -> None:
        self.impl = impl
        self.last_budget = last_budget
        self.detail: dict[str, Any] = dict(getattr(impl, "detail", {}))

    def append(self, cid: str, user: str, assistant: str, messages: list[Any]) -> None:
        self.impl.add_turn(cid, user, assistant, messages)

    def read_all(self, cid: str) -> list[Any]:
        result: list[Any] = self.impl.history(cid, None)
        return result

    def read_last(self, cid: str, n: int) -> list[Any]:
        result: list[Any] = self.impl.history(cid, self.last_budget)
        return result

    def kv_set(self, scope: str, key: str, value: Any) -> None:
        self.impl.wm_set(scope, key, value)

    def kv_get(self, scope: str, key: str) -> Any:
        return self.impl.wm_get(scope, key)

    def kv_delete(self, scope: str, key: str) -> None:
        self.impl.wm_delete(scope, key)

    def close(self) -> None:
        self.impl.close()


class AsyncSameWork(SameWork):
    """:class:`SameWork` for async baselines (``open`` first)."""

    async def open(self) -> None:
        await self.impl.open()

    async def append(  # type: ignore[override]
        self, cid: str, user: str, assistant: str, messages: list[Any]
    ) -> None:
        await self.impl.add_turn(cid, user, assistant, messages)

    async def read_all(self, cid: str) -> list[Any]:  # type: ignore[override]
        result: list[Any] = await self.impl.history(cid, None)
        return result

    async def read_last(self, cid: str, n: int) -> list[Any]:  # type: ignore[override]
        result: list[Any] = await self.impl.history(cid, self.last_budget)
        return result

    async def kv_set(self, scope: str, key: str, value: Any) -> None:  # type: ignore[override]
        await self.impl.wm_set(scope, key, value)

    async def kv_get(self, scope: str, key: str) -> Any:
        return await self.impl.wm_get(scope, key)

    async def kv_delete(self, scope: str, key: str) -> None:  # type: ignore[override]
        await self.impl.wm_delete(scope, key)

    async def close(self) -> None:  # type: ignore[override]
        await self.impl.close()


class OursCells(SameWork):
    """firefly_orm (:class:`bench.ours.Ours`): ``read_last`` is the library's last-N read."""

    def read_last(self, cid: str, n: int) -> list[Any]:
        result: list[Any] = self.impl.recent(cid, n)
        return result


class AsyncOursCells(AsyncSameWork):
    """firefly_orm async (:class:`bench.ours.AsyncOurs`)."""

    async def read_last(self, cid: str, n: int) -> list[Any]:  # type: ignore[override]
        result: list[Any] = await self.impl.recent(cid, n)
        return result


# --------------------------------------------------------------------------- set-up


Factory = Callable[[], Any]


def entry(label: str, role: str, cells: frozenset[str], factory: Factory) -> Entry:
    """Build an implementation; "not installed" when its package is missing."""
    try:
        impl = factory()
    except ImportError as exc:
        return Entry(label, role, None, cells, status=f"not installed ({exc.name or exc})")
    except Exception as exc:
        traceback.print_exception(exc, limit=6)
        return Entry(label, role, None, cells, status=f"FAILED (set-up): {exc!r}"[:300])
    detail = dict(getattr(impl, "detail", {}) or {})
    return Entry(label, role, impl, cells, detail=detail)


def close_sync(entries: list[Entry], log: Callable[[str], None]) -> None:
    for e in entries:
        if e.impl is not None:
            try:
                e.impl.close()
            except Exception as exc:
                log(f"  closing {e.label}: {type(exc).__name__}: {exc}")


async def open_async(comparison: Comparison) -> None:
    """Open every async implementation (one that fails to open is reported failed)."""
    for e in comparison.entries:
        if e.impl is not None:
            try:
                await e.impl.open()
            except ImportError as exc:
                e.impl = None
                e.status = f"not installed ({exc.name or exc})"
            except Exception as exc:
                comparison.fail(e, "open", exc)
            else:
                e.detail.update(getattr(e.impl, "detail", {}) or {})


async def close_async(entries: list[Entry], log: Callable[[str], None]) -> None:
    for e in entries:
        if e.impl is not None:
            try:
                await e.impl.close()
            except Exception as exc:
                log(f"  closing {e.label}: {type(exc).__name__}: {exc}")
