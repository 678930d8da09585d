"""Contention (issue 17, item 8): 2,000 concurrent add_turn calls on ONE conversation.

On PostgreSQL, with a budget of a few turns (nearly every turn evicts and needs a
new summary) and a deterministic summarizer that sleeps a little (a slow model,
so races are wide), writers in threads, async tasks and two other processes add
2,000 turns to one conversation.  A database with row locks should queue them:
0 refused with ``ConcurrencyError``, every turn stored once (live or archived),
the head's counts equal to the stored turns and the summary chain covering
exactly the archived turns, in order.

Figures printed: calls / refused / summarizer calls (each beyond one per
evicting turn is a summary thrown away after a lost race) / latency / wall time.
``FIREFLY_FAULTS_CONTENTION_CALLS`` scales the number of calls (default 2000).

How: a writer whose summary went stale (it lost a race) locks the head and calls
the summarizer while holding the lock, on stores whose ``for_update`` locks one
row (:func:`firefly_orm.bridges._steps.locks_rows`: PostgreSQL).  The smaller tests
below pin that down deterministically: the second summary is made under the
head's lock, a summarizer failing there writes nothing and releases the lock,
and SQLite / staged stores never hold a transaction open during a summary.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults.harness import (
    ContendConfig,
    CountingSummarizer,
    Ledger,
    StoreSpec,
    Tally,
    async_add_turn_calls,
    audit_conversations,
    close_store,
    conversation_memory,
    read_contend_result,
    run_threads,
    spawn_contenders,
    summary_batches,
)

CALLS = int(os.environ.get("FIREFLY_FAULTS_CONTENTION_CALLS", "2000"))
PROCESSES = 2
PROCESS_THREADS = 4
THREADS = 16
TASKS = 16
#: Calls per writer: the processes' threads, the threads and the tasks share CALLS.
PER_WRITER = CALLS // (PROCESSES * PROCESS_THREADS + THREADS + TASKS)
MAX_TOKENS = 24
#: Seconds the summarizer sleeps (a model call, made short).
SUMMARY_SLEEP = 0.002
CONVERSATION = "contended"


@pytest.fixture
def spec(postgres_url: str) -> Iterator[StoreSpec]:
    """A PostgreSQL schema of this test's own, migrated."""
    spec = StoreSpec("postgres", postgres_url, "t_" + uuid.uuid4().hex[:10])
    store = spec.open()
    try:
        store.initialize()
    finally:
        close_store(store)
    try:
        yield spec
    finally:
        from dbutil import drop_schema

        drop_schema(postgres_url, str(spec.name))


def _async_writers(memory: Any, ledger: Ledger, tally: Tally) -> None:
    async def main() -> None:
        await asyncio.gather(
            *(
                async_add_turn_calls(memory, CONVERSATION, f"a{i}", PER_WRITER, ledger, tally)
                for i in range(TASKS)
            )
        )
        await memory.store.async_close()

    asyncio.run(main())


@pytest.mark.postgres
@pytest.mark.slow
def test_concurrent_add_turns_on_one_conversation_are_queued_not_refused(
    spec: StoreSpec, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    configs = [
        ContendConfig(
            store=spec,
            result=str(tmp_path / f"process-{p}.json"),
            tag=f"p{p}",
            conversation_id=CONVERSATION,
            max_tokens=MAX_TOKENS,
            threads=PROCESS_THREADS,
            calls=PER_WRITER,
            summary_sleep=SUMMARY_SLEEP,
            go=str(go),
        )
        for p in range(PROCESSES)
    ]
    processes = spawn_contenders(configs)

    ledger, tally, async_tally = Ledger(), Tally(), Tally()
    summarizer = CountingSummarizer(SUMMARY_SLEEP)
    sync_store = spec.open(pool_size=THREADS)
    async_store = spec.open(pool_size=TASKS)
    try:
        sync_memory = conversation_memory(sync_store, MAX_TOKENS, summarizer)
        async_memory = conversation_memory(async_store, MAX_TOKENS, summarizer)
        sync_store.initialize()
        started = time.monotonic()
        go.touch()
        async_thread = threading.Thread(
            target=_async_writers, args=(async_memory, ledger, async_tally), daemon=True
        )
        async_thread.start()
        tally.merge(run_threads(sync_memory, CONVERSATION, "s", THREADS, PER_WRITER, ledger))
        async_thread.join()
        for process in processes:
            assert process.wait(timeout=120) == 0, "a contending process failed"
        elapsed = time.monotonic() - started
        tally.merge(async_tally)
        summaries = summarizer.calls + sum(
            read_contend_result(Path(c.result), ledger, tally) for c in configs
        )
        audit = audit_conversations(sync_store, [CONVERSATION], ledger, max_tokens=MAX_TOKENS)
        archived = len(sync_memory.get_archived_turns(CONVERSATION))
        used = summary_batches(sync_memory.get_summary(CONVERSATION))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        close_store(sync_store)
        close_store(async_store)

    print(
        f"\n[contention / postgres] calls={tally.calls} refused={tally.refused} "
        f"errors={len(tally.errors)} stored={audit.stored} archived={archived} "
        f"lost={len(audit.lost)} duplicated={len(audit.duplicated)} "
        f"summarizer-calls={summaries} (used {used}, thrown away after a lost race "
        f"{summaries - used}) "
        f"latency p50={tally.latency(0.5):.3f}s p99={tally.latency(0.99):.2f}s "
        f"max={tally.latency(1.0):.2f}s wall={elapsed:.1f}s"
    )
    assert not tally.errors, tally.errors[:5]
    assert tally.refused == 0, f"{tally.refused} of {tally.calls} add_turn calls were refused"
    assert tally.calls == PER_WRITER * (PROCESSES * PROCESS_THREADS + THREADS + TASKS)
    assert tally.acked == tally.calls == len(ledger.acked)
    audit.assert_clean()
    assert audit.stored == tally.calls, "every call's turn is stored, live or archived"
    assert audit.unacked_stored == 0
    assert archived > tally.calls // 2, "the budget should have evicted most turns"
    # A writer that lost a race queues on the head's lock and summarises under it:
    # at most one summary per call is made in vain (it was ~9 per call before).
    assert summaries <= 2 * tally.calls, f"{summaries} summaries for {tally.calls} calls"


# --------------------------------------------------------------------------- the mechanism


def _head_is_locked(spec: StoreSpec, conversation_id: str) -> bool:
    """Whether another connection finds the conversation's head row locked (NOWAIT)."""
    import sqlalchemy as sa

    from firefly_orm.conversation._rows import HEAD_KEY, conversation_namespace

    engine = sa.create_engine(spec.location, poolclass=sa.pool.NullPool)
    table = sa.table("memory_entries", sa.column("namespace"), sa.column("key"), schema=spec.name)
    query = (
        sa.select(sa.literal(1))
        .select_from(table)
        .where(table.c.namespace == conversation_namespace(conversation_id))
        .where(table.c.key == HEAD_KEY)
        .with_for_update(nowait=True)
    )
    try:
        with engine.begin() as conn:
            conn.execute(query).all()
        return False
    except sa.exc.OperationalError as exc:
        if "could not obtain lock" in str(exc):
            return True
        raise
    finally:
        engine.dispose()


class RaceLosingSummarizer:
    """First call: another writer adds a turn meanwhile (this writer loses the race).

    Later calls record whether the head is locked while they run, and raise
    ``fail`` if given.
    """

    def __init__(self, spec: StoreSpec, other: Any, fail: Exception | None = None) -> None:
        self.spec = spec
        self.other = other
        self.fail = fail
        self.locked_during: list[bool] = []
        self.calls = 0

    def __call__(self, turns: Any) -> str:
        from faults.harness import chain_summarizer

        self.calls += 1
        if self.calls == 1:
            rival = threading.Thread(
                target=self.other.add_turn, args=(CONVERSATION, "rival", BIG_ANSWER)
            )
            rival.start()
            rival.join()
        else:
            self.locked_during.append(_head_is_locked(self.spec, CONVERSATION))
            if self.fail is not None:
                raise self.fail
        return chain_summarizer(turns)


#: Large enough that each of the two racing turns evicts, whatever the other did.
BIG_ANSWER = "many words " * 4


def _seeded(spec: StoreSpec) -> tuple[Any, Any]:
    """A store and a plain memory on it, the conversation holding enough turns to evict."""
    store = spec.open(pool_size=4)
    plain = conversation_memory(store, MAX_TOKENS)
    for n in range(6):
        plain.add_turn(CONVERSATION, f"seed {n}", "some answer words")
    return store, plain


@pytest.mark.postgres
def test_a_writer_that_lost_a_race_summarises_under_the_head_lock(spec: StoreSpec) -> None:
    store, plain = _seeded(spec)
    try:
        summarizer = RaceLosingSummarizer(spec, plain)
        memory = conversation_memory(store, MAX_TOKENS, summarizer)
        turn = memory.add_turn(CONVERSATION, "loser", BIG_ANSWER)
        print(
            f"\n[contention / lost race] summarizer calls={summarizer.calls} "
            f"head locked during the retry's summary={summarizer.locked_during}"
        )
        # once in vain (outside any transaction), once under the head's lock
        assert summarizer.calls == 2
        assert summarizer.locked_during == [True]
        turns = plain.get_turns(CONVERSATION)
        assert [t.user_prompt for t in turns][-2:] == ["rival", "loser"]
        assert turns[-1].turn_id == turn.turn_id
        ledger = Ledger(attempted={t.user_prompt for t in plain.get_archived_turns(CONVERSATION)})
        ledger.attempted |= {t.user_prompt for t in turns}
        audit_conversations(store, [CONVERSATION], ledger, max_tokens=MAX_TOKENS).assert_clean()
    finally:
        close_store(store)


@pytest.mark.postgres
async def test_async_writer_that_lost_a_race_summarises_under_the_head_lock(
    spec: StoreSpec,
) -> None:
    store, plain = _seeded(spec)
    try:
        summarizer = RaceLosingSummarizer(spec, plain)
        memory = conversation_memory(store, MAX_TOKENS, summarizer)
        await memory.async_add_turn(CONVERSATION, "loser", BIG_ANSWER)
        assert summarizer.calls == 2
        assert summarizer.locked_during == [True]
        assert [t.user_prompt for t in plain.get_turns(CONVERSATION)][-2:] == ["rival", "loser"]
    finally:
        await store.async_close()
        close_store(store)


@pytest.mark.postgres
def test_a_summarizer_failing_under_the_head_lock_writes_nothing_and_unlocks(
    spec: StoreSpec,
) -> None:
    store, plain = _seeded(spec)
    try:
        summarizer = RaceLosingSummarizer(spec, plain, fail=RuntimeError("model down"))
        memory = conversation_memory(store, MAX_TOKENS, summarizer)
        with pytest.raises(RuntimeError, match="model down"):
            memory.add_turn(CONVERSATION, "loser", BIG_ANSWER)
        assert summarizer.locked_during == [True]
        turns, archived = plain.get_turns(CONVERSATION), plain.get_archived_turns(CONVERSATION)
        assert turns[-1].user_prompt == "rival"  # the rival's turn only, nothing of the loser
        assert "loser" not in {t.user_prompt for t in turns + archived}
        ledger = Ledger(attempted={t.user_prompt for t in turns + archived})
        audit_conversations(store, [CONVERSATION], ledger, max_tokens=MAX_TOKENS).assert_clean()
        assert not _head_is_locked(spec, CONVERSATION)
        plain.add_turn(CONVERSATION, "after", "r")
        assert plain.get_turns(CONVERSATION)[-1].user_prompt == "after"
    finally:
        close_store(store)


def test_only_stores_with_row_locks_hold_a_transaction_during_a_summary(tmp_path: Path) -> None:
    """SQLite's write lock covers the whole database, staged stores lock nothing."""
    from firefly_orm.bridges._steps import locks_rows
    from firefly_orm.file_store import FileStore
    from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore
    from firefly_orm.store import InMemoryStore

    sqlite = SQLiteStore(tmp_path / "m.sqlite3")
    postgres = PostgreSQLStore("postgresql+psycopg://u@127.0.0.1:1/x")  # never connects
    try:
        assert locks_rows(postgres) is True
        assert locks_rows(SQLAlchemyStore("postgresql+psycopg://u@127.0.0.1:1/x")) is True
        assert locks_rows(sqlite) is False
        assert locks_rows(InMemoryStore()) is False
        assert locks_rows(FileStore(tmp_path / "files")) is False
    finally:
        sqlite.close()
        postgres.close()
