"""A journaled commit's write that the driver retried and the server ran twice (MongoDB).

pymongo retries a write once when its answer is lost (a broken connection, a
server restarted or killed), with the same transaction number.  mongod keeps
each retryable write's outcome (``config.transactions``, durable with the write
itself) and answers the retry with it.  A server that lost that record runs the
write again: the SecantusDB test server keeps the records in memory, so a
restart forgets them (what ``test_server_restart.py`` met under heavy load,
where each answer also waits for the disk sync after the write is made).  A
commit without transactions (:mod:`firefly_orm.mongo._journal`) must still end
all or nothing:

* its conditional write, run again, no longer finds the version it expects (it
  wrote the next one itself): the commit took that for a conflict, undid
  nothing of it and raised :class:`~firefly_orm.errors.ConcurrencyError`, so
  the head stayed written without the turn (``add_turn`` then retried: the
  head counted one turn too many);
* its insert of locks and journal, run again, collides with the documents the
  first run stored: the commit waited for its own locks until their lease ran
  out, then recovered (dropped) its own commit and started again.

Each test makes the driver's retry happen at the exact write: the write is sent
twice, the first answer thrown away, as the retry after a lost answer is.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from faults.harness import Ledger, audit_conversations, conversation_memory
from pymongo import MongoClient
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.collection import Collection

from firefly_orm.conversation._rows import HEAD_KEY, conversation_namespace
from firefly_orm.entry import MemoryEntry, derived_entry_id
from firefly_orm.mongo import MongoDBStore
from firefly_orm.mongo._journal import LOCK_PREFIX

pytestmark = pytest.mark.mongo


@pytest.fixture
def database(mongo_url: str) -> Iterator[str]:
    name = "retried_" + uuid.uuid4().hex[:10]
    yield name
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_url)
    client.drop_database(name)
    client.close()


@pytest.fixture
def store(mongo_url: str, database: str) -> Iterator[MongoDBStore]:
    # A short lease: before the fix, a commit waiting for its own locks waited that long.
    store = MongoDBStore(mongo_url, database=database, transactions=False, commit_lease=1.0)
    store.initialize()
    yield store
    store.close()


@pytest.fixture
def raw(mongo_url: str, database: str) -> Iterator[Collection[dict[str, Any]]]:
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_url, tz_aware=True)
    yield client[database]["entries"]
    client.close()


def run_twice(
    monkeypatch: pytest.MonkeyPatch, method: str, chosen: Callable[[Any], bool]
) -> list[Any]:
    """The first ``AsyncCollection.<method>`` call whose first argument is ``chosen`` runs twice.

    The first run's answer is thrown away; the caller gets the second run's
    (answer or error): a retry after a lost answer, on a server that forgot the
    first run.  Returns the list of the arguments it did this to.
    """
    original = getattr(AsyncCollection, method)
    hits: list[Any] = []

    async def twice(self: Any, first: Any, *args: Any, **kwargs: Any) -> Any:
        if not hits and chosen(first):
            hits.append(first)
            await original(self, first, *args, **kwargs)  # applied; the answer is lost
        return await original(self, first, *args, **kwargs)

    monkeypatch.setattr(AsyncCollection, method, twice)
    return hits


def head(namespace: str, content: str) -> MemoryEntry:
    entry_id = derived_entry_id(namespace, HEAD_KEY)
    return MemoryEntry(entry_id=entry_id, key=HEAD_KEY, content=content)


def state(raw: Collection[dict[str, Any]]) -> dict[str, Any]:
    """Contents and versions by namespace and key, and the journal documents left."""
    found: dict[str, Any] = {"journal": 0}
    for doc in raw.find():
        if "namespace" not in doc:
            found["journal"] += 1
        else:
            found[f"{doc['namespace']}/{doc.get('key')}"] = (doc["content"], doc["version"])
    return found


@pytest.mark.parametrize("expected", [0, 1], ids=["insert", "update"])
def test_a_conditional_write_run_twice_is_not_a_conflict(
    store: MongoDBStore,
    raw: Collection[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    expected: int,
) -> None:
    """A head written with its precondition (new, or at version 1) and a turn: one commit."""
    if expected:
        store.save("a", head("a", "old"))
    head_id = derived_entry_id("a", HEAD_KEY)
    hits = run_twice(
        monkeypatch,
        "update_one",
        lambda where: where.get("entry_id") == head_id,
    )
    with store.unit_of_work() as uow:
        uow.entries.save("a", head("a", "new"), expected_version=expected)
        uow.entries.save("a", MemoryEntry(key="turn:1", content="turn"))
        uow.commit()
    assert len(hits) == 1, "the conditional write was not run twice"
    assert state(raw) == {"journal": 0, "a/head": ("new", expected + 1), "a/turn:1": ("turn", 1)}


def test_a_lock_insert_run_twice_does_not_wait_for_itself(
    store: MongoDBStore,
    raw: Collection[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The second run collides with the first's locks and journal: they are this commit's."""
    store.save("a", head("a", "old"))
    store.save("b", head("b", "old"))
    caplog.set_level(logging.INFO, logger="firefly_orm.mongo")
    hits = run_twice(
        monkeypatch,
        "insert_many",
        lambda docs: bool(docs) and str(docs[0].get("entry_id", "")).startswith(LOCK_PREFIX),
    )
    with store.unit_of_work() as uow:
        for namespace in ("a", "b"):
            uow.entries.save(namespace, head(namespace, "new"), expected_version=1)
        uow.entries.save("a", MemoryEntry(key="turn:1", content="turn"))
        uow.commit()
    assert len(hits) == 1 and len(hits[0]) == 3, "locks a, b and the journal, run twice"
    recovered = [r.getMessage() for r in caplog.records if "recover" in r.getMessage()]
    assert recovered == [], "the commit waited for its own locks, then recovered itself"
    assert state(raw) == {
        "journal": 0,
        "a/head": ("new", 2),
        "b/head": ("new", 2),
        "a/turn:1": ("turn", 1),
    }


def test_add_turn_audit_holds_when_the_heads_write_runs_twice(
    store: MongoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restart test's audit, on the conversation whose head write was run twice."""
    memory = conversation_memory(store, max_tokens=20)
    ledger = Ledger()
    cid = "retried"
    head_id = derived_entry_id(conversation_namespace(cid), HEAD_KEY)

    def add(n: int) -> None:
        prompt = f"p:{n}"
        ledger.attempt(prompt)
        turn = memory.add_turn(cid, prompt, " ".join(["ok"] * (1 + n % 4)))
        ledger.ack(prompt, cid, turn.turn_id)

    for n in range(4):
        add(n)
    hits = run_twice(
        monkeypatch,
        "update_one",
        lambda where: where.get("entry_id") == head_id and "version" in where,
    )
    for n in range(4, 8):
        add(n)
    assert len(hits) == 1, "the head's conditional write was not run twice"
    monkeypatch.undo()
    audit = audit_conversations(store, [cid], ledger, max_tokens=20)
    audit.assert_clean()
    assert audit.stored == 8 and audit.unacked_stored == 0
