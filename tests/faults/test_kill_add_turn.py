"""kill -9 under load, on every persistent store: no acknowledged turn lost, none duplicated.

Several child processes (:func:`~faults.harness.add_turns_forever`) add turns to
two shared conversations with a token budget of a few turns (so nearly every turn
evicts; ``keep_evicted=True`` and a deterministic chain summarizer).  Each child
logs an attempt before ``add_turn`` and, once it returns, the acknowledged turn
(fsynced).  The parent SIGKILLs each child after 1 to 4 acknowledged turns, at a
random point of the next one (:class:`~faults.harness.KillLoop`), and starts a new
one, until :data:`IN_FLIGHT_KILLS` kills have landed with an ``add_turn`` in flight
and :data:`MIN_ACKS` turns were acknowledged: the same work on a slow or a fast
machine.  Then it audits the store (:func:`audit_conversations`):
every acknowledged turn stored once, under its conversation and turn id (live or
archived); no turn stored twice or that nobody attempted; heads' ``turn_count`` /
``total_tokens`` / ``next_turn_id`` agree with the stored turns; the summary covers
exactly the archived turns.

Figures printed per store: attempts / kills (in flight) / acknowledged / lost /
duplicated.  ``FIREFLY_FAULTS_KILLS`` changes the kills in flight per store (default 8).
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
    Writer,
    WriterConfig,
    add_turns_forever,
    audit_conversations,
    close_store,
    read_ledger,
)

#: Kills that must land with an add_turn in flight (its attempt logged, no ack yet).
IN_FLIGHT_KILLS = int(os.environ.get("FIREFLY_FAULTS_KILLS", "8"))
#: Turns the writers must get acknowledged, all kills together.
MIN_ACKS = 20
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

    def writer(slot: int, generation: int, log: Path) -> Writer:
        config = WriterConfig(
            store=spec,
            log=str(log),
            tag=f"w{slot}g{generation}",
            conversations=CONVERSATIONS,
            max_tokens=MAX_TOKENS,
            seed=rng.randrange(2**32),
        )
        return Writer(add_turns_forever, (config,), log)

    loop = KillLoop(
        writer, logs, children=CHILDREN, in_flight=IN_FLIGHT_KILLS, min_acks=MIN_ACKS, rng=rng
    )
    figures = loop.run()
    ledger = read_ledger(figures.logs)

    store = spec.open()
    try:
        audit = audit_conversations(store, CONVERSATIONS, ledger, max_tokens=MAX_TOKENS)
    finally:
        close_store(store)
    print(
        f"\n[kill -9 / {spec.kind}] attempts={len(ledger.attempted)} {figures.describe()} "
        f"lost={len(audit.lost)} duplicated={len(audit.duplicated)} stored={audit.stored} "
        f"unacknowledged-but-stored={audit.unacked_stored} "
        f"inconsistencies={len(audit.problems)} writer-errors={len(figures.crashed)}"
    )
    assert not figures.crashed, "a writer failed by itself:\n" + "\n".join(
        f"{log} exit {code}:\n{tail}" for log, code, tail in figures.crashed[:3]
    )
    assert not figures.timed_out, f"safety timeout: {figures.describe()}"
    assert figures.in_flight >= IN_FLIGHT_KILLS, f"too few kills in flight: {figures.describe()}"
    assert len(ledger.acked) >= MIN_ACKS, "too few acknowledged turns for the test to mean anything"
    audit.assert_clean()
