"""Two processes, one conversation: several OS processes append to the same conversation.

Each worker process (forked from the suite's warm fork server, ``tests/forked.py``,
so nothing of the test process is inherited but the arguments) opens its OWN
store on the same database (one SQLite file, or one PostgreSQL schema) and its
own :class:`ConversationMemory`, waits on a barrier so that all workers start
together, and adds ``TURNS_PER_WORKER`` turns to the same conversation id.  The
conversation does not exist before the workers start, so they also race to create
its head.

Afterwards the parent checks what a single-writer run would guarantee: no turn
lost or duplicated, turn ids unique and increasing, every worker's turns in the
order it added them, the head's token total equal to the stored estimates, and
(with eviction) a summary chain that covers exactly the archived turns.
"""

from __future__ import annotations

import contextlib
import queue as queue_module
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import forked
import pytest

from firefly_orm.conversation import SUMMARY_TURN_ID, ConversationMemory, ConversationTurn
from firefly_orm.tokens import TokenEstimator

WORKERS = 4
TURNS_PER_WORKER = 25
TOTAL_TURNS = WORKERS * TURNS_PER_WORKER
#: Seconds the workers wait for each other at the start barrier.
BARRIER_TIMEOUT = 120.0
#: Seconds the parent waits for all workers' results.
RESULT_TIMEOUT = 240.0
#: A budget no run of this test reaches (nothing is evicted).
LARGE_BUDGET = 10_000_000
#: A budget of a few turns (eviction on almost every append).
SMALL_BUDGET = 40
CONVERSATION_ID = "shared-conversation"

pytestmark = pytest.mark.slow


# --------------------------------------------------------------------------- worker side
# Everything a worker runs is module-level (picklable by reference under spawn).


def chain_summarizer(turns: list[ConversationTurn]) -> str:
    """Deterministic summarizer: the previous summary followed by the evicted turn ids.

    The summary is a comma-separated list of turn ids; when the conversation
    already has a summary it arrives first as the synthetic turn
    ``SUMMARY_TURN_ID``, and its text is kept as the prefix.
    """
    previous = ""
    ids: list[str] = []
    for turn in turns:
        if turn.turn_id == SUMMARY_TURN_ID:
            previous = turn.assistant_response
        else:
            ids.append(str(turn.turn_id))
    return ",".join(part for part in (previous, ",".join(ids)) if part)


def prompt_for(worker: int, n: int) -> str:
    """The user prompt of worker ``worker``'s ``n``-th turn."""
    return f"worker {worker} turn {n}"


def response_for(worker: int, n: int) -> str:
    """The assistant response of worker ``worker``'s ``n``-th turn (lengths vary)."""
    return " ".join(["ok"] * (1 + (worker + n) % 4))


def _open_store(kind: str, location: str, schema: str | None) -> Any:
    if kind == "sqlite":
        from firefly_orm.sql import SQLiteStore

        return SQLiteStore(location)
    from firefly_orm.sql import PostgreSQLStore

    return PostgreSQLStore(location, schema_name=schema, pool_size=2, pool_min_size=0)


def _worker(
    kind: str,
    location: str,
    schema: str | None,
    index: int,
    max_tokens: int,
    evict: bool,
    lockstep: bool,
    barrier: Any,
    results: Any,
    policy: dict[str, Any] | None = None,
) -> None:
    """Add ``TURNS_PER_WORKER`` turns; report ``("ok", index, ids)`` or ``("error", ...)``.

    All workers start together (barrier); with ``lockstep`` they also meet at the
    barrier after every turn, so each round of ``WORKERS`` appends contends for
    the same head.
    """
    store = None
    try:
        store = _open_store(kind, location, schema)
        memory = ConversationMemory(
            store=store,
            max_tokens=max_tokens,
            summarize_threshold=0,
            summarizer=chain_summarizer if evict else None,
            keep_evicted=evict,
            **(policy or {}),
        )
        barrier.wait(BARRIER_TIMEOUT)
        ids: list[int] = []
        for n in range(TURNS_PER_WORKER):
            turn = memory.add_turn(CONVERSATION_ID, prompt_for(index, n), response_for(index, n))
            ids.append(turn.turn_id)
            if lockstep:
                barrier.wait(BARRIER_TIMEOUT)
        results.put(("ok", index, ids))
    except BaseException:
        results.put(("error", index, traceback.format_exc()))
        with contextlib.suppress(Exception):  # let the other workers stop waiting
            barrier.abort()
    finally:
        if store is not None:
            store.close()


# --------------------------------------------------------------------------- parent side


@dataclass
class Database:
    """One database the workers share, plus the means to open stores on it."""

    kind: str
    location: str
    schema: str | None

    def open(self) -> Any:
        return _open_store(self.kind, self.location, self.schema)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    admin: Any = None
    if request.param == "sqlite":
        db = Database("sqlite", str(tmp_path / "shared.sqlite3"), None)
    else:
        url: str = request.getfixturevalue("postgres_url")
        admin = request.getfixturevalue("postgres_admin_engine")
        db = Database("postgres", url, "t_" + uuid.uuid4().hex[:10])

    # Migrate once up front: concurrent first-time initialisation is tested in
    # test_sql_store.py; here every worker starts on an up-to-date database.
    try:
        store = db.open()
        try:
            store.initialize()
        finally:
            store.close()
        yield db
    finally:
        if admin is not None and db.schema is not None:
            from dbutil import drop_schema

            drop_schema(admin, db.schema)


def run_workers(
    db: Database,
    *,
    max_tokens: int,
    evict: bool,
    lockstep: bool,
    policy: dict[str, Any] | None = None,
) -> dict[int, list[int]]:
    """Run ``WORKERS`` processes; return worker index -> the turn ids add_turn returned."""
    ctx = forked.context()
    barrier = ctx.Barrier(WORKERS)
    results = ctx.Queue()
    processes = [
        ctx.Process(
            target=_worker,
            args=(
                db.kind,
                db.location,
                db.schema,
                i,
                max_tokens,
                evict,
                lockstep,
                barrier,
                results,
                policy,
            ),
            name=f"firefly-worker-{i}",
        )
        for i in range(WORKERS)
    ]
    for process in processes:
        process.start()
    outcomes: list[tuple[str, int, Any]] = []
    try:
        for _ in processes:
            try:
                outcomes.append(results.get(timeout=RESULT_TIMEOUT))
            except queue_module.Empty:
                dead = [p.name for p in processes if not p.is_alive() and p.exitcode != 0]
                pytest.fail(
                    f"workers did not report within {RESULT_TIMEOUT}s "
                    f"(reported: {outcomes}; crashed: {dead})"
                )
        for process in processes:
            process.join(timeout=30)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join(timeout=10)
        results.close()
        results.join_thread()
    errors = [f"worker {i}:\n{detail}" for status, i, detail in outcomes if status != "ok"]
    assert not errors, "\n".join(errors)
    assert [p.exitcode for p in processes] == [0] * WORKERS
    returned = {i: ids for _, i, ids in outcomes}
    assert sorted(returned) == list(range(WORKERS))
    return returned


def check_workers_order_and_returned_ids(
    turns: list[ConversationTurn], returned: dict[int, list[int]], *, lockstep: bool
) -> None:
    """Every worker's turns are stored in the order it added them, under the ids it got."""
    by_id = {t.turn_id: t for t in turns}
    for worker, ids in returned.items():
        assert len(ids) == TURNS_PER_WORKER
        assert ids == sorted(ids), f"worker {worker} got non-increasing ids {ids}"
        if lockstep:
            # round n (between two barriers) used exactly the ids WORKERS*n .. WORKERS*n+3
            assert [turn_id // WORKERS for turn_id in ids] == list(range(TURNS_PER_WORKER))
        for n, turn_id in enumerate(ids):
            stored = by_id[turn_id]
            assert stored.user_prompt == prompt_for(worker, n)
            assert stored.assistant_response == response_for(worker, n)
        mine = [t.user_prompt for t in turns if t.user_prompt.startswith(f"worker {worker} ")]
        assert mine == [prompt_for(worker, n) for n in range(TURNS_PER_WORKER)]


@pytest.mark.parametrize("lockstep", [False, True], ids=["free", "lockstep"])
def test_processes_share_one_conversation_without_eviction(
    database: Database, lockstep: bool
) -> None:
    returned = run_workers(database, max_tokens=LARGE_BUDGET, evict=False, lockstep=lockstep)

    store = database.open()
    try:
        memory = ConversationMemory(store=store, max_tokens=LARGE_BUDGET, summarize_threshold=0)
        turns = memory.get_turns(CONVERSATION_ID)
        ids = [t.turn_id for t in turns]
        assert len(turns) == TOTAL_TURNS
        assert ids == list(range(TOTAL_TURNS))  # no gap, no duplicate, increasing
        assert sorted(i for worker_ids in returned.values() for i in worker_ids) == ids
        check_workers_order_and_returned_ids(turns, returned, lockstep=lockstep)

        estimator = TokenEstimator()
        for turn in turns:
            assert turn.token_estimate == estimator.estimate(
                f"{turn.user_prompt}\n{turn.assistant_response}"
            )
        assert memory.get_total_tokens(CONVERSATION_ID) == sum(t.token_estimate for t in turns)
        assert memory.get_archived_turns(CONVERSATION_ID) == []
        assert memory.get_summary(CONVERSATION_ID) is None
        assert memory.conversation_ids == [CONVERSATION_ID]
    finally:
        store.close()


@pytest.mark.parametrize("lockstep", [False, True], ids=["free", "lockstep"])
def test_processes_share_one_conversation_with_eviction(database: Database, lockstep: bool) -> None:
    returned = run_workers(database, max_tokens=SMALL_BUDGET, evict=True, lockstep=lockstep)

    store = database.open()
    try:
        memory = ConversationMemory(
            store=store,
            max_tokens=SMALL_BUDGET,
            summarize_threshold=0,
            summarizer=chain_summarizer,
            keep_evicted=True,
        )
        kept = memory.get_turns(CONVERSATION_ID)
        archived = memory.get_archived_turns(CONVERSATION_ID)
        kept_ids = [t.turn_id for t in kept]
        archived_ids = [t.turn_id for t in archived]

        # eviction really ran, and no turn was lost or duplicated
        assert archived, "the small budget should have evicted turns"
        assert len(kept) + len(archived) == TOTAL_TURNS
        assert archived_ids + kept_ids == list(range(TOTAL_TURNS))
        everything = archived + kept
        check_workers_order_and_returned_ids(everything, returned, lockstep=lockstep)

        # the retained turns fit the budget, and the head agrees with them
        retained_total = sum(t.token_estimate for t in kept)
        assert retained_total <= SMALL_BUDGET or len(kept) == 1
        assert memory.get_total_tokens(CONVERSATION_ID) == retained_total
        # FIFO eviction trims only as far as needed: one more turn would not fit
        assert retained_total + archived[-1].token_estimate > SMALL_BUDGET

        # the summary chain: every summary extended the previous one with the turns
        # it evicted, so the final summary lists exactly the archived ids, in order
        summary = memory.get_summary(CONVERSATION_ID)
        assert summary is not None
        assert [int(part) for part in summary.split(",")] == archived_ids
    finally:
        store.close()


#: The pinned-and-recent policy with a message window (issue 10).
PINNED_POLICY: dict[str, Any] = {"pin_count": 1, "recent_count": 2, "max_messages": 8}


@pytest.mark.parametrize("lockstep", [False, True], ids=["free", "lockstep"])
def test_processes_share_one_conversation_with_pinned_window(
    database: Database, lockstep: bool
) -> None:
    returned = run_workers(
        database, max_tokens=LARGE_BUDGET, evict=True, lockstep=lockstep, policy=PINNED_POLICY
    )
    store = database.open()
    try:
        memory = ConversationMemory(
            store=store,
            max_tokens=LARGE_BUDGET,
            summarize_threshold=0,
            summarizer=chain_summarizer,
            keep_evicted=True,
            **PINNED_POLICY,
        )
        kept = memory.get_turns(CONVERSATION_ID)
        archived = memory.get_archived_turns(CONVERSATION_ID)
        kept_ids = [t.turn_id for t in kept]
        archived_ids = [t.turn_id for t in archived]
        # nothing lost or duplicated, ids unique, the pinned first turn never evicted
        assert sorted(kept_ids + archived_ids) == list(range(TOTAL_TURNS))
        assert kept_ids[0] == 0 and 0 not in archived_ids
        check_workers_order_and_returned_ids(
            sorted(archived + kept, key=lambda t: t.turn_id), returned, lockstep=lockstep
        )
        # the window holds: plain turns are two messages each
        assert sum(t.message_count for t in kept) <= PINNED_POLICY["max_messages"]
        assert memory.get_total_tokens(CONVERSATION_ID) == sum(t.token_estimate for t in kept)
        assert memory.verify(CONVERSATION_ID) == []
        # the summary chain covers exactly the archived turns, oldest first
        summary = memory.get_summary(CONVERSATION_ID)
        assert summary is not None
        assert [int(part) for part in summary.split(",")] == archived_ids
    finally:
        store.close()
