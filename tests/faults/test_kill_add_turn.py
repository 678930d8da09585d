"""kill -9 under load, on every persistent store: no acknowledged turn lost, none duplicated.

Several child processes (``harness.py add-turns``) add turns to two shared
conversations with a token budget of a few turns (so nearly every turn evicts;
``keep_evicted=True`` and a deterministic chain summarizer).  Each child logs an
attempt before ``add_turn`` and, once it returns, the acknowledged turn (fsynced).
The parent SIGKILLs the children at random moments while they write and restarts
them, for a bounded time; then it audits the store (:func:`audit_conversations`):
every acknowledged turn stored once, under its conversation and turn id (live or
archived); no turn stored twice or that nobody attempted; heads' ``turn_count`` /
``total_tokens`` / ``next_turn_id`` agree with the stored turns; the summary covers
exactly the archived turns.

Figures printed per store: attempts / kills / acknowledged / lost / duplicated.
``FIREFLY_FAULTS_SECONDS`` changes the time per store (default 10).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults.harness import (
    KillLoop,
    StoreSpec,
    WriterConfig,
    audit_conversations,
    close_store,
    read_ledger,
)

SECONDS = float(os.environ.get("FIREFLY_FAULTS_SECONDS", "10"))
CHILDREN = 3
CONVERSATIONS = ("kill-a", "kill-b")
#: A budget of a few turns: nearly every add_turn evicts (and summarises).
MAX_TOKENS = 20


@pytest.fixture(
    params=[
        "sqlite",
        "file",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mongo", marks=pytest.mark.mongo),
    ]
)
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreSpec]:
    """The shared store of one test, initialised (migrated) before the children start."""
    name = "t_" + os.urandom(5).hex()
    kind = str(request.param)
    if kind == "sqlite":
        spec = StoreSpec(kind, str(tmp_path / "shared.sqlite3"))
    elif kind == "file":
        spec = StoreSpec(kind, str(tmp_path / "files"))
    elif kind == "postgres":
        spec = StoreSpec(kind, str(request.getfixturevalue("postgres_url")), name)
    else:  # a server of its own: killed writers leave open transactions behind
        spec = StoreSpec(kind, str(request.getfixturevalue("dedicated_mongo_url")), name)
    store = spec.open()
    try:
        if hasattr(store, "initialize"):
            store.initialize()
    finally:
        close_store(store)
    try:
        yield spec
    finally:
        if kind == "postgres":
            from dbutil import drop_schema

            drop_schema(spec.location, name)
        elif kind == "mongo" and os.environ.get("FIREFLY_ORM_TEST_MONGO_URL"):
            # (the suite's own server goes away with the test)
            from dbutil import drop_mongo_database

            drop_mongo_database(spec.location, name)


def test_kill_9_loses_no_acknowledged_turn(spec: StoreSpec, tmp_path: Path) -> None:
    rng = random.Random()
    logs = tmp_path / "logs"
    logs.mkdir()

    def config(slot: int, generation: int, log: Path) -> WriterConfig:
        return WriterConfig(
            store=spec,
            log=str(log),
            tag=f"w{slot}g{generation}",
            conversations=CONVERSATIONS,
            max_tokens=MAX_TOKENS,
            seed=rng.randrange(2**32),
        )

    loop = KillLoop(
        config,
        logs,
        children=CHILDREN,
        duration=SECONDS,
        rng=rng,
        enough=lambda: loop.figures.kills >= 5 and len(read_ledger(loop.figures.logs).acked) >= 20,
    )
    figures = loop.run()
    ledger = read_ledger(figures.logs)

    store = spec.open()
    try:
        audit = audit_conversations(store, CONVERSATIONS, ledger, max_tokens=MAX_TOKENS)
    finally:
        close_store(store)
    print(
        f"\n[kill -9 / {spec.kind}] attempts={len(ledger.attempted)} kills={figures.kills} "
        f"acknowledged={len(ledger.acked)} lost={len(audit.lost)} "
        f"duplicated={len(audit.duplicated)} stored={audit.stored} "
        f"unacknowledged-but-stored={audit.unacked_stored} "
        f"inconsistencies={len(audit.problems)} writer-errors={len(figures.crashed)}"
    )
    assert not figures.crashed, "a writer failed by itself:\n" + "\n".join(
        f"{log} exit {code}:\n{tail}" for log, code, tail in figures.crashed[:3]
    )
    assert figures.kills >= 5, f"only {figures.kills} kills: the children did not get going"
    assert len(ledger.acked) >= 20, "too few acknowledged turns for the test to mean anything"
    audit.assert_clean()
